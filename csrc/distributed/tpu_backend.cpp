#include "distributed/tpu_backend.h"

#include <ATen/ATen.h>

#include <chrono>

#include "distributed/xla_work.h"
#include "exec/fused_eager.h"
#include "exec/host_transfer.h"
#include "runtime/metrics.h"

namespace torchtpu::distributed {
namespace {

// Whether a collective's tensors all live in host memory (then the host backend runs it as is).
// Mixing devices in one collective is a user error NCCL also rejects; say which devices.
bool on_host(const char* op, std::initializer_list<const std::vector<at::Tensor>*> groups) {
  bool any_host = false, any_device = false;
  for (const auto* group : groups) {
    for (const auto& t : *group) {
      if (!t.defined()) continue;
      if (t.device().is_cpu()) {
        any_host = true;
      } else if (t.device().is_privateuseone()) {
        any_device = true;
      } else {
        TORCH_CHECK(false, "torch.distributed ", op, " on the tpu backend: got a tensor on ",
                    t.device(), "; its tensors must be on tpu (or all on cpu)");
      }
    }
  }
  TORCH_CHECK(!(any_host && any_device), "torch.distributed ", op,
              " on the tpu backend: got tensors on both cpu and tpu; all tensors of one "
              "collective must be on tpu (or all on cpu)");
  return !any_device;
}

std::vector<const std::vector<at::Tensor>*> flat(const std::vector<std::vector<at::Tensor>>& v) {
  std::vector<const std::vector<at::Tensor>*> out;
  for (const auto& x : v) out.push_back(&x);
  return out;
}

bool on_host(const char* op, const std::vector<at::Tensor>& a,
             const std::vector<std::vector<at::Tensor>>& b) {
  if (!on_host(op, {&a})) {
    for (const auto* g : flat(b)) on_host(op, {&a, g});
    return false;
  }
  bool host = true;
  for (const auto* g : flat(b)) host = on_host(op, {&a, g}) && host;
  return host;
}

// Whether all of `a` and `b` hold one number of elements (all_to_all's in-program form).
bool same_numel(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (const auto* list : {&a, &b}) {
    for (const at::Tensor& t : *list) {
      if (t.numel() != a.at(0).numel()) return false;
    }
  }
  return true;
}

}  // namespace

// The host side of one collective: host copies of its tpu tensors and what to copy back.
class TpuBackend::Staging {
 public:
  Staging(HostBufferPool& pool, StagingStats& stats) : pool_(pool), stats_(stats) {
    // Fused eager: a collective ends the rank's pending region, at the same op on every rank.
    if (exec::fused::enabled()) exec::fused::flush(-1, exec::fused::Cause::kCollective);
  }
  // A host copy of `t`'s values; waits for the device work that produced `t`.
  at::Tensor input(const at::Tensor& t) {
    auto start = std::chrono::steady_clock::now();
    at::Tensor h = pool_.empty(t.sizes(), t.scalar_type());
    exec::to_cpu_into(t, h);
    stats_.to_host_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    stats_.to_host_bytes += static_cast<int64_t>(h.nbytes());
    runtime::metrics().collective_host_bytes += static_cast<int64_t>(h.nbytes());
    return h;
  }
  // An uninitialized host tensor shaped like `t`, copied into `t` when the host work is done.
  at::Tensor output(const at::Tensor& t) {
    at::Tensor h = pool_.empty(t.sizes(), t.scalar_type());
    copy_back(t, h);
    return h;
  }
  // A host copy of `t`'s values, copied back into `t` when the host work is done.
  at::Tensor inout(const at::Tensor& t) {
    at::Tensor h = input(t);
    copy_back(t, h);
    return h;
  }
  std::vector<at::Tensor> inputs(const std::vector<at::Tensor>& ts) { return map(ts, 0); }
  std::vector<at::Tensor> outputs(const std::vector<at::Tensor>& ts) { return map(ts, 1); }
  std::vector<at::Tensor> inouts(const std::vector<at::Tensor>& ts) { return map(ts, 2); }

  // The op the host transport runs. Gloo has no AVG or PREMUL_SUM: PREMUL_SUM scales the host
  // inputs (private copies) and sums; AVG sums and divides the host outputs before the copy back.
  c10d::ReduceOp reduce_op(const c10d::ReduceOp& op, const std::vector<at::Tensor>& host_inputs,
                           const std::vector<at::Tensor>& host_outputs, int group_size) {
    if (op == c10d::ReduceOp::PREMUL_SUM) {
      auto* factor = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(factor != nullptr, "PREMUL_SUM reduce op without its factor");
      for (auto& h : host_inputs) {
        if (factor->tensor_factor.defined()) {
          h.mul_(factor->tensor_factor.to(at::kCPU));
        } else {
          h.mul_(factor->double_factor);
        }
      }
      return c10d::ReduceOp::SUM;
    }
    if (op == c10d::ReduceOp::AVG) {
      for (const auto& h : host_outputs) {
        TORCH_CHECK(at::isFloatingType(h.scalar_type()) || at::isComplexType(h.scalar_type()),
                    "ReduceOp.AVG on the tpu backend needs a floating point tensor, got ",
                    h.scalar_type());
      }
      pending.host_epilogue = [host_outputs, group_size] {
        for (const auto& h : host_outputs) h.div_(group_size);
      };
      return c10d::ReduceOp::SUM;
    }
    return op;
  }

  PendingCollective pending;

 private:
  HostBufferPool& pool_;
  StagingStats& stats_;
  void copy_back(const at::Tensor& device, const at::Tensor& host) {
    pending.device_outputs.push_back(device);
    pending.host_outputs.push_back(host);
  }
  std::vector<at::Tensor> map(const std::vector<at::Tensor>& ts, int kind) {
    std::vector<at::Tensor> out;
    out.reserve(ts.size());
    for (const auto& t : ts) out.push_back(kind == 0 ? input(t) : kind == 1 ? output(t) : inout(t));
    return out;
  }
};

TpuBackend::TpuBackend(c10::intrusive_ptr<c10d::Backend> host, int rank, int size,
                       std::unique_ptr<XlaTransport> xla, std::string transport_reason)
    : c10d::Backend(rank, size),
      host_(std::move(host)),
      xla_(std::move(xla)),
      transport_reason_(std::move(transport_reason)) {
  TORCH_CHECK(host_, "the tpu backend needs a host backend");
  TORCH_CHECK(host_->getRank() == rank && host_->getSize() == size,
              "the tpu backend's host backend has rank/size ", host_->getRank(), "/",
              host_->getSize(), ", expected ", rank, "/", size);
}

TpuBackend::~TpuBackend() = default;

void TpuBackend::shutdown() {
  completions_.drain();
  host_->shutdown();
}

c10::intrusive_ptr<c10d::Work> TpuBackend::launch(Staging& staging, c10d::OpType type,
                                                  std::vector<at::Tensor> result) {
  staging.pending.result = result;
  stats_.collectives++;
  auto work = c10::make_intrusive<StagedWork>(getRank(), type, std::move(result));
  completions_.finish(std::move(staging.pending), work);
  return track(work);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::track(c10::intrusive_ptr<c10d::Work> work) {
  if (coalescing_ && work) coalesced_.push_back(work);
  return work;
}

void TpuBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_,
              "tpu backend: startCoalescing called twice without endCoalescing in between");
  coalescing_ = true;
  coalesced_.clear();
  if (xla_) xla_->start_coalescing();
}

c10::intrusive_ptr<c10d::Work> TpuBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "tpu backend: endCoalescing called without startCoalescing");
  coalescing_ = false;
  if (xla_) {
    // The batch's collectives ran as they were called; its sends and receives run now.
    std::vector<c10::intrusive_ptr<c10d::Work>> parts = std::move(coalesced_);
    coalesced_.clear();
    for (auto& w : xla_->end_coalescing()) parts.push_back(std::move(w));
    return c10::make_intrusive<CoalescedWork>(getRank(), std::move(parts));
  }
  // The completion queue runs in issue order, so when it reaches this entry every staged member
  // has completed (waiting on it only collects its error); host-only members are waited for.
  PendingCollective pending;
  std::vector<at::Tensor> result;
  for (auto& work : coalesced_) {
    // The staged members hold their tensors; a host backend's send/recv Work has no result().
    if (auto* staged = dynamic_cast<StagedWork*>(work.get())) {
      for (auto& t : staged->result()) result.push_back(t);
    }
    pending.host_work.push_back(std::move(work));
  }
  coalesced_.clear();
  pending.result = result;
  auto work =
      c10::make_intrusive<StagedWork>(getRank(), c10d::OpType::COALESCED, std::move(result));
  completions_.finish(std::move(pending), work);
  return work;
}

c10::intrusive_ptr<c10d::Work> TpuBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  if (on_host("broadcast", {&tensors})) return track(host_->broadcast(tensors, opts));
  if (in_program(tensors, c10d::OpType::BROADCAST)) {
    return track(xla_->broadcast(tensors, static_cast<int>(opts.rootRank)));
  }
  Staging s(host_pool_, stats_);
  // The root only sends: nothing to copy back; the others only receive.
  auto host = opts.rootRank == getRank() ? s.inputs(tensors) : s.outputs(tensors);
  s.pending.host_work.push_back(host_->broadcast(host, opts));
  return launch(s, c10d::OpType::BROADCAST, tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  if (on_host("allreduce", {&tensors})) return track(host_->allreduce(tensors, opts));
  if (in_program(tensors, c10d::OpType::ALLREDUCE)) {
    return track(xla_->allreduce(tensors, opts.reduceOp));
  }
  Staging s(host_pool_, stats_);
  auto host = s.inouts(tensors);
  c10d::AllreduceOptions host_opts = opts;
  host_opts.reduceOp = s.reduce_op(opts.reduceOp, host, host, getSize());
  s.pending.host_work.push_back(host_->allreduce(host, host_opts));
  return launch(s, c10d::OpType::ALLREDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (on_host("allreduce_coalesced", {&tensors})) {
    return track(host_->allreduce_coalesced(tensors, opts));
  }
  if (in_program(tensors, c10d::OpType::ALLREDUCE_COALESCED)) {
    return track(xla_->allreduce(tensors, opts.reduceOp));
  }
  Staging s(host_pool_, stats_);
  auto host = s.inouts(tensors);
  c10d::AllreduceCoalescedOptions host_opts = opts;
  host_opts.reduceOp = s.reduce_op(opts.reduceOp, host, host, getSize());
  s.pending.host_work.push_back(host_->allreduce_coalesced(host, host_opts));
  return launch(s, c10d::OpType::ALLREDUCE_COALESCED, tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::ReduceOptions& opts) {
  if (on_host("reduce", {&tensors})) return track(host_->reduce(tensors, opts));
  if (in_program(tensors, c10d::OpType::REDUCE) && opts.reduceOp != c10d::ReduceOp::PREMUL_SUM) {
    return track(xla_->reduce(tensors, opts.reduceOp, static_cast<int>(opts.rootRank)));
  }
  Staging s(host_pool_, stats_);
  // Only the root's tensor receives the result; the others' stay as they were.
  bool root = opts.rootRank == getRank();
  auto host = root ? s.inouts(tensors) : s.inputs(tensors);
  c10d::ReduceOptions host_opts = opts;
  host_opts.reduceOp =
      s.reduce_op(opts.reduceOp, host, root ? host : std::vector<at::Tensor>{}, getSize());
  s.pending.host_work.push_back(host_->reduce(host, host_opts));
  return launch(s, c10d::OpType::REDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) {
  if (on_host("allgather", inputs, outputs)) return track(host_->allgather(outputs, inputs, opts));
  if (in_program(inputs, c10d::OpType::ALLGATHER)) return track(xla_->allgather(outputs, inputs));
  Staging s(host_pool_, stats_);
  auto host_in = s.inputs(inputs);
  std::vector<std::vector<at::Tensor>> host_out;
  for (const auto& o : outputs) host_out.push_back(s.outputs(o));
  s.pending.host_work.push_back(host_->allgather(host_out, host_in, opts));
  std::vector<at::Tensor> result;
  for (const auto& o : outputs) result.insert(result.end(), o.begin(), o.end());
  return launch(s, c10d::OpType::ALLGATHER, std::move(result));
}

// Any output of the right size, checked before either path runs.
void TpuBackend::check_gathered_size(const at::Tensor& output, const at::Tensor& input) const {
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "all_gather_into_tensor on the tpu backend: the output has ", output.numel(),
              " elements, expected the input's ", input.numel(), " times the group size ",
              getSize());
}

// NCCL and the in-program path take any all_gather output of the right size (FSDP2 and DTensor
// pass a stacked (world, *input) one); gloo wants (world * input.size(0), *input.sizes()[1:]), so
// it gets that view of the same host memory.
at::Tensor TpuBackend::gloo_gather_view(const at::Tensor& host_out, const at::Tensor& input) const {
  std::vector<int64_t> gathered = input.sizes().vec();
  if (gathered.empty()) gathered.push_back(1);
  gathered[0] *= getSize();
  return host_out.view(gathered);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> in{input}, out{output};
  if (on_host("all_gather_into_tensor", {&in, &out})) {
    return track(host_->_allgather_base(output, input, opts));
  }
  check_gathered_size(output, input);
  if (in_program(in, c10d::OpType::_ALLGATHER_BASE)) return track(xla_->allgather_into(out, in));
  Staging s(host_pool_, stats_);
  at::Tensor host_in = s.input(input);
  at::Tensor gloo_out = gloo_gather_view(s.output(output), input);
  s.pending.host_work.push_back(host_->_allgather_base(gloo_out, host_in, opts));
  return launch(s, c10d::OpType::_ALLGATHER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (on_host("allgather_coalesced", inputs, outputs)) {
    return track(host_->allgather_coalesced(outputs, inputs, opts));
  }
  if (in_program(inputs, c10d::OpType::ALLGATHER_COALESCED)) {
    return track(xla_->allgather(outputs, inputs));
  }
  Staging s(host_pool_, stats_);
  auto host_in = s.inputs(inputs);
  std::vector<std::vector<at::Tensor>> host_out;
  for (const auto& o : outputs) host_out.push_back(s.outputs(o));
  s.pending.host_work.push_back(host_->allgather_coalesced(host_out, host_in, opts));
  std::vector<at::Tensor> result;
  for (const auto& o : outputs) result.insert(result.end(), o.begin(), o.end());
  return launch(s, c10d::OpType::ALLGATHER_COALESCED, std::move(result));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (on_host("allgather_into_tensor_coalesced", {&inputs, &outputs})) {
    return track(host_->allgather_into_tensor_coalesced(outputs, inputs, opts));
  }
  TORCH_CHECK(outputs.size() == inputs.size(),
              "allgather_into_tensor_coalesced on the tpu backend: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) check_gathered_size(outputs[i], inputs[i]);
  if (in_program(inputs, c10d::OpType::COALESCED)) {
    return track(xla_->allgather_into(outputs, inputs));
  }
  Staging s(host_pool_, stats_);
  auto host_in = s.inputs(inputs);
  auto host_out = s.outputs(outputs);
  for (size_t i = 0; i < host_out.size(); ++i)
    host_out[i] = gloo_gather_view(host_out[i], inputs[i]);
  s.pending.host_work.push_back(host_->allgather_into_tensor_coalesced(host_out, host_in, opts));
  return launch(s, c10d::OpType::COALESCED, outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::GatherOptions& opts) {
  if (on_host("gather", inputs, outputs)) return track(host_->gather(outputs, inputs, opts));
  if (in_program(inputs, c10d::OpType::GATHER)) {
    return track(xla_->gather(outputs, inputs, static_cast<int>(opts.rootRank)));
  }
  Staging s(host_pool_, stats_);
  auto host_in = s.inputs(inputs);
  std::vector<std::vector<at::Tensor>> host_out;
  for (const auto& o : outputs) host_out.push_back(s.outputs(o));
  s.pending.host_work.push_back(host_->gather(host_out, host_in, opts));
  std::vector<at::Tensor> result;
  for (const auto& o : outputs) result.insert(result.end(), o.begin(), o.end());
  return launch(s, c10d::OpType::GATHER, std::move(result));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  if (on_host("scatter", outputs, inputs)) return track(host_->scatter(outputs, inputs, opts));
  if (in_program(outputs, c10d::OpType::SCATTER)) {
    return track(xla_->scatter(outputs, inputs, static_cast<int>(opts.rootRank)));
  }
  Staging s(host_pool_, stats_);
  auto host_out = s.outputs(outputs);
  std::vector<std::vector<at::Tensor>> host_in;
  for (const auto& i : inputs) host_in.push_back(s.inputs(i));
  s.pending.host_work.push_back(host_->scatter(host_out, host_in, opts));
  return launch(s, c10d::OpType::SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  if (on_host("reduce_scatter", outputs, inputs)) {
    return track(host_->reduce_scatter(outputs, inputs, opts));
  }
  if (in_program(outputs, c10d::OpType::REDUCE_SCATTER) &&
      opts.reduceOp != c10d::ReduceOp::PREMUL_SUM) {
    return track(xla_->reduce_scatter(outputs, inputs, opts.reduceOp));
  }
  Staging s(host_pool_, stats_);
  auto host_out = s.outputs(outputs);
  std::vector<std::vector<at::Tensor>> host_in;
  std::vector<at::Tensor> all_in;
  for (const auto& i : inputs) {
    host_in.push_back(s.inputs(i));
    all_in.insert(all_in.end(), host_in.back().begin(), host_in.back().end());
  }
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = s.reduce_op(opts.reduceOp, all_in, host_out, getSize());
  s.pending.host_work.push_back(host_->reduce_scatter(host_out, host_in, host_opts));
  return launch(s, c10d::OpType::REDUCE_SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> in{input}, out{output};
  if (on_host("reduce_scatter_tensor", {&in, &out})) {
    return track(host_->_reduce_scatter_base(output, input, opts));
  }
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "reduce_scatter_tensor on the tpu backend: the input has ", input.numel(),
              " elements, expected the output's ", output.numel(), " times the group size ",
              getSize());
  if (in_program(in, c10d::OpType::_REDUCE_SCATTER_BASE)) {
    return track(xla_->reduce_scatter_from(out, in, opts.reduceOp));
  }
  Staging s(host_pool_, stats_);
  at::Tensor host_in = s.input(input);
  at::Tensor host_out = s.output(output);
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = s.reduce_op(opts.reduceOp, {host_in}, {host_out}, getSize());
  s.pending.host_work.push_back(host_->_reduce_scatter_base(host_out, host_in, host_opts));
  return launch(s, c10d::OpType::_REDUCE_SCATTER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  if (on_host("reduce_scatter_tensor_coalesced", {&inputs, &outputs})) {
    return track(host_->reduce_scatter_tensor_coalesced(outputs, inputs, opts));
  }
  if (in_program(inputs, c10d::OpType::COALESCED)) {
    return track(xla_->reduce_scatter_from(outputs, inputs, opts.reduceOp));
  }
  Staging s(host_pool_, stats_);
  auto host_in = s.inputs(inputs);
  auto host_out = s.outputs(outputs);
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = s.reduce_op(opts.reduceOp, host_in, host_out, getSize());
  s.pending.host_work.push_back(
      host_->reduce_scatter_tensor_coalesced(host_out, host_in, host_opts));
  return launch(s, c10d::OpType::COALESCED, outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                         std::vector<int64_t>& output_split_sizes,
                                                         std::vector<int64_t>& input_split_sizes,
                                                         const c10d::AllToAllOptions& opts) {
  std::vector<at::Tensor> in{input}, out{output};
  if (on_host("all_to_all_single", {&in, &out})) {
    return track(host_->alltoall_base(output, input, output_split_sizes, input_split_sizes, opts));
  }
  if (in_program(in, c10d::OpType::ALLTOALL_BASE) &&
      (xla_->layout().in_process || (output_split_sizes.empty() && input_split_sizes.empty()))) {
    return track(xla_->alltoall_single(output, input, output_split_sizes, input_split_sizes));
  }
  Staging s(host_pool_, stats_);
  at::Tensor host_in = s.input(input);
  at::Tensor host_out = s.output(output);
  s.pending.host_work.push_back(
      host_->alltoall_base(host_out, host_in, output_split_sizes, input_split_sizes, opts));
  return launch(s, c10d::OpType::ALLTOALL_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllToAllOptions& opts) {
  if (on_host("all_to_all", {&inputs, &outputs}))
    return track(host_->alltoall(outputs, inputs, opts));
  if (in_program(inputs, c10d::OpType::ALLTOALL) && same_numel(inputs, outputs)) {
    return track(xla_->alltoall(outputs, inputs));
  }
  Staging s(host_pool_, stats_);
  auto host_in = s.inputs(inputs);
  auto host_out = s.outputs(outputs);
  s.pending.host_work.push_back(host_->alltoall(host_out, host_in, opts));
  return launch(s, c10d::OpType::ALLTOALL, outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                int tag) {
  if (on_host("send", {&tensors})) return track(host_->send(tensors, dst_rank, tag));
  if (in_program(tensors, c10d::OpType::SEND)) return track(xla_->send(tensors, dst_rank));
  Staging s(host_pool_, stats_);
  auto host = s.inputs(tensors);
  s.pending.host_work.push_back(host_->send(host, dst_rank, tag));
  return launch(s, c10d::OpType::SEND, tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                int tag) {
  if (on_host("recv", {&tensors})) return track(host_->recv(tensors, src_rank, tag));
  if (in_program(tensors, c10d::OpType::RECV)) return track(xla_->recv(tensors, src_rank));
  Staging s(host_pool_, stats_);
  auto host = s.outputs(tensors);
  s.pending.host_work.push_back(host_->recv(host, src_rank, tag));
  return launch(s, c10d::OpType::RECV, tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::barrier(const c10d::BarrierOptions& opts) {
  if (xla_) {
    completions_.drain();  // the collectives it staged (gather, scatter) too
    return track(xla_->barrier());
  }
  // Like NCCL's barrier, a barrier also waits for this rank's device work (a rank timing a step
  // or writing a checkpoint after a barrier expects its own work done), and for the copies back
  // of earlier collectives.
  exec::synchronize(-1);
  completions_.drain();
  return track(host_->barrier(opts));
}

}  // namespace torchtpu::distributed
