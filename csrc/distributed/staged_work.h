// The Work a tpu collective returns, and the queue that finishes it.
//
// A collective on tpu tensors runs in three steps: the inputs are copied to host memory on the
// caller's thread (which waits for the device work that produced them), a host transport runs
// the collective on the host copies (asynchronously, on its own threads), and the results are
// handed to the tpu tensors (which take the host memory over where the plugin allows). The last
// step must not run on the caller's thread: DDP and FSDP chain callbacks on Work::getFuture() and
// never call wait(). So each backend owns a CompletionQueue, one thread that, in issue order, waits
// for a collective's host work, copies its results into the tpu tensors and only then completes the
// Work and its future.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace torchtpu::distributed {

// Where a backend's staged collectives spend their time (summed over calls, nanoseconds), so a
// benchmark can say what the staging costs beside the host transport.
struct StagingStats {
  std::atomic<int64_t> collectives{0};
  std::atomic<int64_t> to_host_ns{0};  // caller: device->host copies (incl. waiting for inputs)
  std::atomic<int64_t> to_host_bytes{0};
  std::atomic<int64_t> host_wait_ns{0};  // completion thread: waiting for the host transport
  std::atomic<int64_t> to_device_ns{0};  // completion thread: epilogue + host->device copies
  std::atomic<int64_t> to_device_bytes{0};
};

// What remains of a collective after its host part was started.
struct PendingCollective {
  // The host transport's work; all must finish before the copies back.
  std::vector<c10::intrusive_ptr<c10d::Work>> host_work;
  // Runs on the host copies after host_work, before the copies back (e.g. AVG's division).
  std::function<void()> host_epilogue;
  // device_outputs[i].copy_(host_outputs[i]) once the host work is done.
  std::vector<at::Tensor> device_outputs;
  std::vector<at::Tensor> host_outputs;
  // The tensors Work::result() and the future's value hold.
  std::vector<at::Tensor> result;
};

class StagedWork final : public c10d::Work {
 public:
  StagedWork(int rank, c10d::OpType type, std::vector<at::Tensor> result);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Called once by the CompletionQueue; wakes waiters and completes the future.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class CompletionQueue {
 public:
  explicit CompletionQueue(StagingStats* stats) : stats_(stats) {}
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  ~CompletionQueue();

  // Finishes `pending` in the background, in the order of the calls, and completes `work`.
  void finish(PendingCollective pending, c10::intrusive_ptr<StagedWork> work);
  // Blocks until everything queued so far has completed (successfully or not).
  void drain();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<PendingCollective, c10::intrusive_ptr<StagedWork>>> queue_;
  size_t in_progress_ = 0;
  bool stopping_ = false;
  std::thread thread_;
  StagingStats* stats_;
};

}  // namespace torchtpu::distributed
