#include "runtime/interrupt.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace torchtpu::runtime {
namespace {

std::atomic<InterruptCheck> installed{nullptr};
std::thread::id check_thread;  // written once, before `installed` is published

// Short enough that Ctrl-C feels immediate, long enough to cost nothing while waiting.
constexpr std::chrono::milliseconds kPoll{20};

struct Ready {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
};

}  // namespace

void set_interrupt_check(InterruptCheck check) {
  check_thread = std::this_thread::get_id();
  installed.store(check, std::memory_order_release);
}

bool interruptible_here() {
  return installed.load(std::memory_order_acquire) != nullptr &&
         std::this_thread::get_id() == check_thread;
}

void check_interrupt() {
  if (!interruptible_here()) return;
  installed.load(std::memory_order_acquire)();
}

void wait_ready(pjrt::Event& event) {
  if (!interruptible_here() || event.is_ready()) return;
  // The callback may outlive this frame when an interrupt ends the wait early.
  auto ready = std::make_shared<Ready>();
  event.on_ready([ready](const std::string&) {
    std::lock_guard<std::mutex> g(ready->mutex);
    ready->done = true;
    ready->cv.notify_all();
  });
  std::unique_lock<std::mutex> lk(ready->mutex);
  while (!ready->cv.wait_for(lk, kPoll, [&] { return ready->done; })) {
    lk.unlock();
    check_interrupt();  // throws to end the wait; the work itself carries on
    lk.lock();
  }
}

void wait_resolved(const pjrt::Buffer& buffer) {
  if (!interruptible_here()) return;
  while (!buffer.wait_for(static_cast<int>(kPoll.count()))) check_interrupt();
}

}  // namespace torchtpu::runtime
