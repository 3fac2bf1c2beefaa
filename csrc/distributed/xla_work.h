// The Work of a collective XLA runs inside a program (distributed/xla_transport.h).
//
// The results are tpu tensors whose buffers the program defines: every later reader, on the
// device or the host, is ordered after the collective by PJRT itself, as a CUDA stream orders
// readers after NCCL. So the future is complete at launch (DDP's and FSDP's callbacks run at
// once, on the caller's thread, and only enqueue more device work), while the Work itself
// completes on the device: isCompleted() polls the result buffers, and wait() blocks until they
// are ready, raising the device's error, or after the group's timeout.
#pragma once

#include <ATen/core/ivalue.h>

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "device/storage.h"

namespace torchtpu::distributed {

class XlaWork final : public c10d::Work {
 public:
  // `buffers`: what the program writes (pending ones while its launch is queued); `timeout`
  // bounds wait(kNoTimeout).
  XlaWork(int rank, c10d::OpType type, std::vector<at::Tensor> result,
          std::vector<device::BufferPtr> buffers, std::chrono::milliseconds timeout);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return result_; }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> result_;
  std::vector<device::BufferPtr> buffers_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex mu_;
  std::exception_ptr error_;
};

// A Work that completes when all of `parts` have (endCoalescing of in-program collectives).
class CoalescedWork final : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> parts);
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> parts_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torchtpu::distributed
