#include "distributed/xla_work.h"

#include <c10/util/Exception.h>

#include <condition_variable>

namespace torchtpu::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for `buffer`'s data until `deadline`; false on timeout. Throws the device's error.
bool await_buffer(const device::BufferPtr& buffer, Clock::time_point deadline) {
  const auto left_ms = [&] {
    return std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
  };
  // A queued launch's output exists once the launch reached PJRT.
  if (!buffer->ready() &&
      !buffer->wait_for(static_cast<int>(std::min<int64_t>(left_ms(), 1 << 30)))) {
    return false;
  }
  std::unique_ptr<pjrt::Event> event = buffer->ready_event();  // raw(): raises a failed launch
  if (event->poll()) return true;
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
    std::string error;
  };
  auto done = std::make_shared<Done>();
  event->on_ready([done](const std::string& error) {
    std::lock_guard<std::mutex> g(done->mu);
    done->ready = true;
    done->error = error;
    done->cv.notify_all();
  });
  std::unique_lock<std::mutex> lk(done->mu);
  if (!done->cv.wait_until(lk, deadline, [&] { return done->ready; })) return false;
  TORCH_CHECK(done->error.empty(), "torchtpu: collective failed on the device: ", done->error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> completed_future(const std::vector<at::Tensor>& result) {
  auto f = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  f->markCompleted(c10::IValue(result));
  return f;
}

}  // namespace

XlaWork::XlaWork(int rank, c10d::OpType type, std::vector<at::Tensor> result,
                 std::vector<device::BufferPtr> buffers, std::chrono::milliseconds timeout)
    : c10d::Work(rank, type),
      result_(std::move(result)),
      buffers_(std::move(buffers)),
      timeout_(timeout),
      future_(completed_future(result_)) {}

bool XlaWork::isCompleted() {
  std::lock_guard<std::mutex> g(mu_);
  if (error_) return true;
  for (const auto& b : buffers_) {
    if (!b->ready()) return false;
    try {
      if (!b->ready_event()->poll()) return false;
    } catch (const std::exception&) {
      error_ = std::current_exception();
      return true;
    }
  }
  return true;
}

bool XlaWork::isSuccess() const {
  std::lock_guard<std::mutex> g(mu_);
  return !error_;
}

std::exception_ptr XlaWork::exception() const {
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

bool XlaWork::wait(std::chrono::milliseconds timeout) {
  const auto limit = timeout == kNoTimeout ? timeout_ : timeout;
  const auto deadline = Clock::now() + limit;
  try {
    for (const auto& b : buffers_) {
      TORCH_CHECK(await_buffer(b, deadline), "torchtpu: collective (",
                  c10d::opTypeToString(retrieveOpType()), ") did not complete within ",
                  limit.count(), " ms");
    }
  } catch (...) {
    std::lock_guard<std::mutex> g(mu_);
    error_ = std::current_exception();
    throw;
  }
  return true;
}

CoalescedWork::CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> parts)
    : c10d::Work(rank, c10d::OpType::COALESCED), parts_(std::move(parts)) {
  future_ = completed_future(result());
}

bool CoalescedWork::isCompleted() {
  for (auto& p : parts_) {
    if (!p->isCompleted()) return false;
  }
  return true;
}

bool CoalescedWork::isSuccess() const {
  for (const auto& p : parts_) {
    if (!p->isSuccess()) return false;
  }
  return true;
}

std::exception_ptr CoalescedWork::exception() const {
  for (const auto& p : parts_) {
    if (auto e = p->exception()) return e;
  }
  return nullptr;
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> out;
  for (auto& p : parts_) {
    try {
      for (auto& t : p->result()) out.push_back(t);
    } catch (const std::exception&) {
      // A host backend's send/recv Work has no result().
    }
  }
  return out;
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  for (auto& p : parts_) p->wait(timeout);
  return true;
}

}  // namespace torchtpu::distributed
