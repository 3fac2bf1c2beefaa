#include "runtime/compile_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "config/config.h"
#include "pjrt/fork_state.h"
#include "runtime/runtime.h"

namespace torchtpu::runtime {
namespace {

// Leaked on purpose, like the in-flight state: its threads outlive static destructors.
struct Pool {
  std::mutex mutex;
  std::condition_variable work;  // a task arrived, or the hold was lifted
  std::condition_variable idle;  // a task finished
  std::deque<std::function<void()>> tasks;
  // Started only when `tasks` is empty, never after exit began, and not waited for by
  // wait_for_compiles until they run (submit_background_compile).
  std::deque<std::function<void()>> background;
  size_t running = 0;
  size_t threads = 0;
  bool held = false;
  // When a foreground compile last arrived or ended: background work waits for a quiet pool, so
  // it never takes a core from a cold run's compiles in a gap between them.
  std::chrono::steady_clock::time_point last_foreground{};
  int rushing = 0;  // finish_background_compiles callers: background work starts at once
};

// How long the pool must go without foreground compiles before background work starts.
constexpr std::chrono::milliseconds kQuiet{1000};

Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

// Set by finish_compiles_for_exit: compiles run on the submitting thread from then on.
std::atomic<bool> exiting{false};

size_t max_threads() {
  static const size_t n = [] {
    unsigned hw = std::thread::hardware_concurrency();
    return static_cast<size_t>(
        config::positive_int("TORCHTPU_COMPILE_THREADS", hw > 0 ? hw : 1, 1024));
  }();
  return n;
}

void worker() {
  Pool& p = pool();
  std::unique_lock<std::mutex> lk(p.mutex);
  for (;;) {
    for (;;) {
      if (!p.held && !p.tasks.empty()) break;
      if (p.held || p.background.empty() || exiting.load(std::memory_order_acquire)) {
        p.work.wait(lk);
        continue;
      }
      const auto quiet_at = p.last_foreground + kQuiet;
      if (p.rushing > 0 || std::chrono::steady_clock::now() >= quiet_at) break;
      p.work.wait_until(lk, quiet_at);
    }
    const bool foreground = !p.tasks.empty();
    std::deque<std::function<void()>>& from = foreground ? p.tasks : p.background;
    std::function<void()> task = std::move(from.front());
    from.pop_front();
    ++p.running;
    lk.unlock();
    task();
    task = nullptr;  // its captures (a module's text) go now, not at the next task
    lk.lock();
    if (foreground) p.last_foreground = std::chrono::steady_clock::now();
    --p.running;
    p.idle.notify_all();
  }
}

void drain_at_exit() { finish_compiles_for_exit(); }

// Queues `task` on `queue` (one of the pool's), starting a thread when all are busy.
void enqueue(std::deque<std::function<void()>> Pool::*queue, std::function<void()> task) {
  Pool& p = pool();
  static const bool registered = std::atexit(drain_at_exit) == 0;
  (void)registered;
  std::lock_guard<std::mutex> g(p.mutex);
  (p.*queue).push_back(std::move(task));
  if (queue == &Pool::tasks) p.last_foreground = std::chrono::steady_clock::now();
  // Threads start as work arrives, up to the bound: a process that never misses starts none.
  if (p.threads < max_threads() && p.threads < p.tasks.size() + p.background.size() + p.running) {
    ++p.threads;
    std::thread(worker).detach();
  }
  p.work.notify_one();
}

}  // namespace

bool async_compile() {
  static const bool on = config::flag("TORCHTPU_ASYNC_COMPILE", true) && !launch_blocking();
  return on;
}

void submit_compile(std::function<void()> task) {
  if (exiting.load(std::memory_order_acquire)) {
    task();
    return;
  }
  enqueue(&Pool::tasks, std::move(task));
}

void submit_background_compile(std::function<void()> task) {
  if (exiting.load(std::memory_order_acquire) || !async_compile()) return;
  enqueue(&Pool::background, std::move(task));
}

void finish_background_compiles() {
  if (exiting.load(std::memory_order_acquire)) return;
  Pool& p = pool();
  std::unique_lock<std::mutex> lk(p.mutex);
  ++p.rushing;
  p.work.notify_all();
  p.idle.wait(
      lk, [&] { return p.held || (p.tasks.empty() && p.background.empty() && p.running == 0); });
  --p.rushing;
}

void hold_compiles(bool hold) {
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mutex);
  p.held = hold;
  if (!hold) p.work.notify_all();
}

bool compiles_held() {
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mutex);
  return p.held;
}

size_t compiles_in_flight() {
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mutex);
  return p.tasks.size() + p.running;
}

void finish_compiles_for_exit() {
  if (pjrt::in_forked_child()) return;  // the parent's threads do not exist here
  exiting.store(true, std::memory_order_release);
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> g(p.mutex);
    p.background.clear();  // work for a future this process no longer has
  }
  hold_compiles(false);
  wait_for_compiles();
}

void wait_for_compiles() {
  Pool& p = pool();
  std::unique_lock<std::mutex> lk(p.mutex);
  // Held compiles do not start: wait for the running ones only (a test reading metrics).
  p.idle.wait(lk, [&] { return (p.held || p.tasks.empty()) && p.running == 0; });
}

}  // namespace torchtpu::runtime
