#include "runtime/trace.h"

#include <c10/util/ApproximateClock.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <memory>
#include <mutex>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime::trace {
namespace detail {
std::atomic<bool> recording{false};
}

namespace {

// Leaked on purpose: plugin threads may still deliver completions while the process exits.
struct State {
  std::mutex mutex;
  std::condition_variable drained;
  std::vector<Record> records;
  int64_t pending = 0;  // traced executions whose completion has not arrived
  std::atomic<uint64_t> next_seq{1};
};
State& state() {
  static State* s = new State;
  return *s;
}

thread_local std::vector<uint64_t> correlation_stack;

int64_t thread_id() {
  thread_local const int64_t tid = static_cast<int64_t>(::syscall(SYS_gettid));
  return tid;
}

uint64_t current_correlation() { return correlation_stack.empty() ? 0 : correlation_stack.back(); }

void append(Record&& r) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mutex);
  s.records.push_back(std::move(r));
}

}  // namespace

int64_t now_ns() { return static_cast<int64_t>(c10::getTime()); }

void start_recording() { detail::recording.store(true); }
void stop_recording() { detail::recording.store(false); }

std::vector<Record> take_records() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mutex);
  std::vector<Record> out;
  out.swap(s.records);
  return out;
}

bool wait_for_traced_executions(std::chrono::milliseconds timeout) {
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mutex);
  return s.drained.wait_for(lk, timeout, [&] { return s.pending == 0; });
}

void push_correlation(uint64_t id) { correlation_stack.push_back(id); }
void pop_correlation() {
  if (!correlation_stack.empty()) correlation_stack.pop_back();
}

void execution_launched(const std::string& signature, int device, int64_t start_ns,
                        pjrt::Event* done) {
  if (start_ns == 0) return;  // tracing was off when the launch began
  auto r = std::make_shared<Record>();
  r->kind = Kind::kExecution;
  size_t paren = signature.find('(');
  r->name = signature.substr(0, paren);
  r->detail = signature;
  r->device = device;
  r->start_ns = start_ns;
  r->launch_end_ns = now_ns();
  r->seq = state().next_seq.fetch_add(1);
  r->correlation = current_correlation();
  r->thread = thread_id();

  // The host side of the launch, like cudaLaunchKernel beside its kernel.
  // Named apart from the op: torch's event tree folds a child named like its parent into it.
  Record launch = *r;
  launch.kind = Kind::kLaunch;
  launch.name = "tpu::launch";
  launch.end_ns = r->launch_end_ns;
  append(std::move(launch));

  {
    State& s = state();
    std::lock_guard<std::mutex> g(s.mutex);
    s.pending++;
  }
  auto finish = [r](const std::string& error) {
    r->end_ns = now_ns();
    if (!error.empty()) r->detail += " [failed: " + error + "]";
    State& s = state();
    std::lock_guard<std::mutex> g(s.mutex);
    s.records.push_back(std::move(*r));
    s.pending--;
    s.drained.notify_all();
  };
  if (done == nullptr) return finish("");
  try {
    done->on_ready(finish);
  } catch (const std::exception&) {
    // A plugin that cannot call back: the end is unknown, so say it ended at launch.
    finish("");
  }
}

void Scope::begin(Kind kind, std::string_view name, int device, int64_t bytes,
                  std::string_view detail) {
  record_.kind = kind;
  record_.name = std::string(name);
  record_.detail = std::string(detail);
  record_.device = device;
  record_.bytes = bytes;
  record_.correlation = current_correlation();
  record_.thread = thread_id();
  record_.start_ns = now_ns();
}

void Scope::set_detail(std::string_view detail) {
  if (active_) record_.detail = std::string(detail);
}

void Scope::end() {
  record_.end_ns = now_ns();
  append(std::move(record_));
}

}  // namespace torchtpu::runtime::trace
