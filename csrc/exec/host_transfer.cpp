#include "exec/host_transfer.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include "exec/executor.h"
#include "exec/fused_eager.h"
#include "lowering/lowering.h"
#include "lowering/strided.h"
#include "runtime/device_checks.h"
#include "runtime/inflight.h"
#include "runtime/interrupt.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"

namespace torchtpu::exec {
namespace {

[[noreturn]] void rethrow(const pjrt::Error& e, const char* what) {
  TORCH_CHECK_WITH(OutOfMemoryError, !e.is_out_of_memory(), "torchtpu: out of device memory ", what,
                   ": ", e.what());
  TORCH_CHECK(false, "torchtpu: ", what, " failed: ", e.what());
}

PJRT_Buffer_Type pjrt_type(shlo::ElementType t) {
  switch (t) {
    case shlo::ElementType::kPred:
      return PJRT_Buffer_Type_PRED;
    case shlo::ElementType::kS8:
      return PJRT_Buffer_Type_S8;
    case shlo::ElementType::kS16:
      return PJRT_Buffer_Type_S16;
    case shlo::ElementType::kS32:
      return PJRT_Buffer_Type_S32;
    case shlo::ElementType::kS64:
      return PJRT_Buffer_Type_S64;
    case shlo::ElementType::kU8:
      return PJRT_Buffer_Type_U8;
    case shlo::ElementType::kU16:
      return PJRT_Buffer_Type_U16;
    case shlo::ElementType::kU32:
      return PJRT_Buffer_Type_U32;
    case shlo::ElementType::kU64:
      return PJRT_Buffer_Type_U64;
    case shlo::ElementType::kF16:
      return PJRT_Buffer_Type_F16;
    case shlo::ElementType::kBF16:
      return PJRT_Buffer_Type_BF16;
    case shlo::ElementType::kF32:
      return PJRT_Buffer_Type_F32;
    case shlo::ElementType::kF64:
      return PJRT_Buffer_Type_F64;
    case shlo::ElementType::kC64:
      return PJRT_Buffer_Type_C64;
    case shlo::ElementType::kC128:
      return PJRT_Buffer_Type_C128;
    case shlo::ElementType::kF8E4M3FN:
      return PJRT_Buffer_Type_F8E4M3FN;
    case shlo::ElementType::kF8E5M2:
      return PJRT_Buffer_Type_F8E5M2;
    case shlo::ElementType::kF8E4M3FNUZ:
      return PJRT_Buffer_Type_F8E4M3FNUZ;
    case shlo::ElementType::kF8E5M2FNUZ:
      return PJRT_Buffer_Type_F8E5M2FNUZ;
  }
  return PJRT_Buffer_Type_INVALID;
}

}  // namespace

device::BufferPtr upload(const void* data, const std::vector<int64_t>& dims,
                         shlo::ElementType dtype, int device) {
  runtime::Runtime& rt = runtime::get();
  runtime::trace::Scope traced(runtime::trace::Kind::kH2D, "tpu::copy_h2d", device,
                               lowering::numel_of(dims) * std::max(1, shlo::bit_width(dtype) / 8));
  try {
    auto buf = rt.client().buffer_from_host(data, pjrt_type(dtype), dims, rt.device(device));
    runtime::metrics().h2d_transfers++;
    runtime::metrics().h2d_bytes +=
        lowering::numel_of(dims) * std::max(1, shlo::bit_width(dtype) / 8);
    return device::BufferPtr(std::move(buf));
  } catch (const pjrt::Error& e) {
    rethrow(e, "copying to the device");
  }
}

namespace {

// `host` (contiguous) followed by zeros up to its size bucket, or `host` itself when the bucket
// is its size. Zeros: padding is never read as data, but garbage bits could be denormals, which
// slow down the elementwise programs that compute over whole buckets.
at::Tensor padded_to_bucket(const at::Tensor& host) {
  const int64_t n = host.numel();
  const int64_t stored = lowering::numel_of(device::buffer_dims(host.sizes()));
  if (!device::flat_buffers() || stored == n) return host;
  at::Tensor padded = at::zeros({stored}, host.options());
  padded.narrow(0, 0, n).copy_(host.reshape({n}));
  return padded;
}

}  // namespace

device::BufferPtr upload_dense(const at::Tensor& host, int device) {
  TORCH_CHECK(host.device().is_cpu() && host.is_contiguous(),
              "upload_dense: expects a contiguous CPU tensor");
  at::Tensor stored = padded_to_bucket(host);
  return upload(stored.data_ptr(), device::buffer_dims(host.sizes()),
                lowering::to_element_type(host.scalar_type()), device);
}

device::BufferPtr upload_lent(const at::Tensor& lent, int device) {
  TORCH_CHECK(lent.device().is_cpu() && lent.is_contiguous() && !lent.is_conj() && !lent.is_neg(),
              "upload_lent: expects a contiguous CPU tensor");
  // A bucket larger than the tensor needs memory of its own (ours, so still lent).
  const at::Tensor host = padded_to_bucket(lent);
  runtime::Runtime& rt = runtime::get();
  shlo::ElementType dtype = lowering::to_element_type(host.scalar_type());
  auto nbytes = static_cast<int64_t>(host.nbytes());
  runtime::trace::Scope traced(runtime::trace::Kind::kH2D, "tpu::copy_h2d", device, nbytes);
  // Zero copy where the plugin supports it (XLA:CPU); the others transfer asynchronously.
  // Mutable: programs may donate the buffer and write into the memory, which is theirs now.
  auto semantics = rt.platform() == "cpu" ? pjrt::HostSemantics::kMutableZeroCopy
                                          : pjrt::HostSemantics::kImmutableUntilTransferCompletes;
  std::unique_ptr<pjrt::Event> done;
  std::unique_ptr<pjrt::Buffer> buf;
  try {
    buf = rt.client().buffer_from_host(host.data_ptr(), pjrt_type(dtype),
                                       device::buffer_dims(lent.sizes()), rt.device(device),
                                       semantics, &done);
  } catch (const pjrt::Error& e) {
    rethrow(e, "copying to the device");
  }
  runtime::metrics().h2d_transfers++;
  runtime::metrics().h2d_bytes += nbytes;
  // The callback's copy of `host` keeps the memory alive until the plugin is done with it (for
  // a zero-copy buffer: until the buffer is freed, possibly long after this backend is gone).
  try {
    done->on_ready([host](const std::string&) {});
  } catch (const pjrt::Error&) {
    // A plugin that cannot call back: never free the memory it may still read.
    new at::Tensor(host);  // NOLINT: deliberately leaked
  }
  return device::BufferPtr(std::move(buf));
}

device::BufferPtr contiguous_buffer(const at::Tensor& t) {
  device::BufferPtr buf;
  std::vector<int64_t> dims;
  shlo::ElementType dtype;
  device::handle_of(t)->snapshot(&buf, &dims, &dtype);
  // A contiguous view from the storage's start whose buffer has the tensor's own dims: its
  // elements come first (a bucketed storage larger than the tensor pads them too).
  if (buf && dtype == lowering::to_element_type(t.scalar_type()) &&
      dims == device::buffer_dims(t.sizes()) && t.is_contiguous() && t.storage_offset() == 0) {
    return buf;
  }
  // One small program gathers the view (and materializes never-written storages as zeros).
  torch::jit::Stack stack{c10::IValue(t)};
  const c10::OperatorHandle& op = op_handle("torchtpu::contiguous_copy", "");
  // Its lowering takes every layout and dtype: it never declines to the CPU fallback.
  auto declined = run_native(plan_for(op), op, &stack);
  TORCH_INTERNAL_ASSERT(!declined, "torchtpu::contiguous_copy declined: ", *declined);
  at::Tensor c = stack.back().toTensor();
  return device::handle_of(c)->buffer();
}

at::Tensor to_cpu(const at::Tensor& t) {
  at::Tensor out = at::empty(t.sizes(), t.options().device(c10::kCPU));
  to_cpu_into(t, out);
  return out;
}

void to_cpu_into(const at::Tensor& t, const at::Tensor& out) {
  TORCH_CHECK(out.device().is_cpu() && out.is_contiguous() && out.sizes() == t.sizes() &&
                  out.scalar_type() == t.scalar_type(),
              "to_cpu_into: the destination must be a contiguous CPU tensor like the source");
  if (t.numel() == 0) return;
  // Fused eager: a host read runs the device's pending region (with the gather of a view, as
  // one program) before it reads, so its checks raise here like strict eager's.
  fused::CauseScope materializing(fused::Cause::kMaterialization);
  device::BufferPtr buf = contiguous_buffer(t);
  if (fused::enabled()) fused::flush(t.device().index(), fused::Cause::kMaterialization);
  runtime::trace::Scope traced(runtime::trace::Kind::kD2H, "tpu::copy_d2h", t.device().index(),
                               static_cast<int64_t>(out.nbytes()));
  if (runtime::interruptible_here()) {
    // Ctrl-C while the value is still being computed raises KeyboardInterrupt here; the
    // transfer has not started, so nothing writes into `out` afterwards.
    try {
      runtime::wait_resolved(*buf);  // its program may still be compiling
      runtime::wait_ready(*buf->ready_event());
    } catch (const pjrt::Error&) {
      // A failed producer: to_host below reports it.
    }
  }
  try {
    // contiguous_buffer's dims, known without waiting for a pending buffer.
    const int64_t stored = lowering::numel_of(device::buffer_dims(t.sizes()));
    if (stored == t.numel()) {
      buf->to_host(out.data_ptr(), out.nbytes());
    } else {
      // A size bucket (device/buckets.h): the whole buffer comes over, its padding stays here.
      at::Tensor whole = at::empty({stored}, out.options());
      buf->to_host(whole.data_ptr(), whole.nbytes());
      out.view({t.numel()}).copy_(whole.narrow(0, 0, t.numel()));
    }
  } catch (const pjrt::Error& e) {
    rethrow(e, "copying to the host");
  }
  runtime::metrics().d2h_transfers++;
  runtime::metrics().d2h_bytes += static_cast<int64_t>(out.nbytes());
  runtime::metrics().host_syncs++;
  // A host read is a sync: checks of the work launched so far raise here, before the values
  // (possibly computed from clamped indices) reach the caller.
  runtime::raise_failed_checks(t.device().index());
}

void synchronize(int device) {
  if (!runtime::is_initialized()) return;
  if (fused::enabled()) fused::flush(device, fused::Cause::kSync);
  runtime::metrics().host_syncs++;
  runtime::trace::Scope traced(runtime::trace::Kind::kSync, "tpu::synchronize", device);
  runtime::wait_for_executions(device);
  runtime::raise_failed_checks(device);
}

}  // namespace torchtpu::exec
