#include "distributed/staged_work.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/DeviceGuard.h>

#include <chrono>

#include "aten/copy.h"
#include "exec/fused_eager.h"
#include "exec/host_transfer.h"
#include "runtime/metrics.h"

namespace torchtpu::distributed {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StagedWork::StagedWork(int rank, c10d::OpType type, std::vector<at::Tensor> result)
    : c10d::Work(rank, type),
      result_(std::move(result)),
      // No devices: the future's value is ready when it is completed (the copies back have
      // already swapped the new buffers into the tpu tensors), so it needs no device events.
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}

bool StagedWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool StagedWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && !error_;
}

std::exception_ptr StagedWork::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::vector<at::Tensor> StagedWork::result() { return result_; }

bool StagedWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == kNoTimeout) {
    done_cv_.wait(lock, [&] { return done_; });
  } else if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) {
    TORCH_CHECK(false, "tpu collective (", c10d::opTypeToString(retrieveOpType()),
                ") did not complete within ", timeout.count(), " ms");
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

void StagedWork::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = error;
  }
  done_cv_.notify_all();
  // The future's callbacks (DDP's and FSDP's) run here, on the completion thread.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(result_));
  }
}

CompletionQueue::~CompletionQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CompletionQueue::finish(PendingCollective pending, c10::intrusive_ptr<StagedWork> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    queue_.emplace_back(std::move(pending), std::move(work));
  }
  cv_.notify_all();
}

void CompletionQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && in_progress_ == 0; });
}

void CompletionQueue::run() {
  // Copying results back launches ops when the network is done: under fused eager they must not
  // join a pending region then (a cut that depended on timing), they run strictly.
  exec::fused::StrictScope strict;
  while (true) {
    std::pair<PendingCollective, c10::intrusive_ptr<StagedWork>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // On shutdown the queue is still emptied: every Work handed out must complete.
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      ++in_progress_;
    }
    PendingCollective& p = item.first;
    std::exception_ptr error;
    try {
      int64_t t0 = now_ns();
      for (auto& w : p.host_work) w->wait();
      int64_t t1 = now_ns();
      if (p.host_epilogue) p.host_epilogue();
      // Like NCCL or gloo writing into the output's memory, the copy back is the collective's
      // own write, not an autograd-visible mutation: it must leave the version counters alone.
      // Selective activation checkpointing caches a collective's output (TorchTitan with tensor
      // parallelism) and raises "has been mutated" when the version moved.
      at::AutoDispatchBelowADInplaceOrView below_version_bump;
      for (size_t i = 0; i < p.device_outputs.size(); ++i) {
        // The host copy is not used again: the device tensor may take its memory (XLA:CPU).
        aten::copy_from_lent_host(p.device_outputs[i], p.host_outputs[i]);
        stats_->to_device_bytes += static_cast<int64_t>(p.host_outputs[i].nbytes());
        runtime::metrics().collective_host_bytes +=
            static_cast<int64_t>(p.host_outputs[i].nbytes());
      }
      stats_->host_wait_ns += t1 - t0;
      stats_->to_device_ns += now_ns() - t1;
    } catch (...) {
      error = std::current_exception();
    }
    // Drop the host copies before completing, so a waiter never sees them alive.
    p = PendingCollective();
    item.second->complete(error);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_progress_;
    }
    cv_.notify_all();
  }
}

}  // namespace torchtpu::distributed
