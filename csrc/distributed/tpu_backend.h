// The c10d backend of the tpu device ("tpu", also registered as "tpu_dist").
//
// Two transports, chosen per group when it is created (select_transport, xla_transport.h):
// - in programs: when every rank's device belongs to one PJRT world (today: thread ranks, each
//   on its own device of this process's client), each collective is one XLA program with the
//   collective inside, launched by every rank on its device (xla_transport.h). Nothing crosses
//   host memory.
// - host staging (every other group, and what the in-program transport does not cover: gather,
//   scatter, complex broadcast/reduce): a collective copies its tpu inputs to host memory
//   (waiting for the device work that produced them), runs the same collective on the host
//   copies with a host c10d backend built over the same store (torch's ProcessGroupGloo, created
//   in Python), and hands the results to the tpu tensors before its Work completes
//   (staged_work.h). A result takes its host buffer over (PJRT kMutableZeroCopy: on XLA:CPU no
//   copy and no fresh allocation, whose page faults cost as much as gloo's own time at 16 MiB);
//   the buffer returns to the pool when PJRT reports the device buffer freed. What is left is
//   one device->host copy per input.
//
// CPU tensors given to this backend (object collectives, barriers, "cpu" in the device map) go
// straight to the host backend.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/host_pool.h"
#include "distributed/staged_work.h"
#include "distributed/xla_transport.h"

namespace torchtpu::distributed {

class TpuBackend final : public c10d::Backend {
 public:
  // `xla`: the in-program transport, or null (then `transport_reason` says why not).
  TpuBackend(c10::intrusive_ptr<c10d::Backend> host, int rank, int size,
             std::unique_ptr<XlaTransport> xla = nullptr, std::string transport_reason = "");
  ~TpuBackend() override;

  const std::string getBackendName() const override { return "tpu"; }
  c10::intrusive_ptr<c10d::Backend> host_backend() const { return host_; }
  const StagingStats& staging_stats() const { return stats_; }
  // "xla" or "gloo", and why.
  std::string transport() const { return xla_ ? "xla" : "gloo"; }
  const std::string& transport_reason() const { return transport_reason_; }
  const XlaTransport* xla_transport() const { return xla_.get(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Coalescing (batch_isend_irecv, _coalescing_manager(device=...)): the collectives between
  // start and end run as they are called (the host transport is asynchronous, so a batch of
  // sends and receives cannot deadlock); endCoalescing returns one Work that completes after
  // all of them, and fails if any of them failed.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    host_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }
  void eagerConnectSingleDevice(at::Device) override {}
  void abort() override { host_->abort(); }
  void shutdown() override;

 private:
  class Staging;
  // all_gather_into_tensor's output holds world_size inputs, or a clear error.
  void check_gathered_size(const at::Tensor& output, const at::Tensor& input) const;
  // The view of a gathered host output that gloo's all_gather accepts (any output of the size).
  at::Tensor gloo_gather_view(const at::Tensor& host_out, const at::Tensor& input) const;
  c10::intrusive_ptr<c10d::Work> launch(Staging& staging, c10d::OpType type,
                                        std::vector<at::Tensor> result);
  // Returns `work`, and keeps it for endCoalescing while coalescing.
  c10::intrusive_ptr<c10d::Work> track(c10::intrusive_ptr<c10d::Work> work);

  // Whether the in-program transport runs this collective of `tensors` (their dtypes).
  bool in_program(const std::vector<at::Tensor>& tensors, c10d::OpType op) const {
    if (!xla_) return false;
    for (const at::Tensor& t : tensors) {
      if (!xla_->supports(t.scalar_type(), op)) return false;
    }
    return true;
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  std::unique_ptr<XlaTransport> xla_;
  std::string transport_reason_;
  // Collectives are issued from one thread per group (as for NCCL), so no lock.
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  // Staging memory, reused across collectives (1 GiB of free buffers at most).
  HostBufferPool host_pool_{int64_t{1} << 30};
  StagingStats stats_;
  // Declared last: destroyed first, so its thread finishes before the pool goes.
  CompletionQueue completions_{&stats_};
};

}  // namespace torchtpu::distributed
