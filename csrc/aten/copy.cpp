// copy_ between host and tpu (and across tpu devices), .item(), and the tiny internal ops the
// runtime itself launches.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "aten/executor.h"
#include "aten/host_transfer.h"
#include "lowering/lowering.h"
#include "lowering/strided.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torchtpu::aten {
namespace {

bool covers_storage(const at::Tensor& t) {
  return t.is_contiguous() && t.storage_offset() == 0 &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

// tpu -> tpu on one device: the generic path lowers aten::copy (convert + broadcast) and
// writes through the destination view.
void device_copy(const at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  torch::jit::Stack stack{c10::IValue(self), c10::IValue(src), c10::IValue(non_blocking)};
  run_lowered_by_name("aten::copy_", "", &stack);
}

int64_t element_bytes(shlo::ElementType t) { return std::max(1, shlo::bit_width(t) / 8); }

// True when `t` views its storage with an element size other than the one its buffer was
// written with (x.view(torch.int16) of a float32 tensor): programs cannot gather such a view.
bool reinterprets_storage(const at::Tensor& t) {
  device::BufferPtr buf;
  std::vector<int64_t> dims;
  shlo::ElementType dtype;
  device::handle_of(t)->snapshot(&buf, &dims, &dtype);
  return buf && element_bytes(dtype) != static_cast<int64_t>(t.element_size());
}

// The storage's bytes as its buffer holds them, on the host (zeros past the written part).
at::Tensor storage_bytes_to_cpu(const at::Tensor& t) {
  device::BufferPtr buf;
  std::vector<int64_t> dims;
  shlo::ElementType dtype;
  device::handle_of(t)->snapshot(&buf, &dims, &dtype);
  int64_t nbytes = static_cast<int64_t>(t.storage().nbytes());
  int64_t written = buf ? lowering::numel_of(dims) * element_bytes(dtype) : 0;
  at::Tensor bytes = at::zeros({std::max(nbytes, written)}, at::TensorOptions(at::kByte));
  if (written == 0) return bytes;
  try {
    buf->to_host(bytes.data_ptr(), static_cast<size_t>(written));
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(false, "torchtpu: copying to the host failed: ", e.what());
  }
  runtime::metrics().d2h_transfers++;
  runtime::metrics().d2h_bytes += written;
  runtime::metrics().host_syncs++;
  return bytes;
}

// `t` as a strided view of the host copy of its storage's bytes.
at::Tensor host_view(const at::Tensor& bytes, const at::Tensor& t) {
  int64_t itemsize = static_cast<int64_t>(t.element_size());
  int64_t usable = static_cast<int64_t>(t.storage().nbytes()) / itemsize * itemsize;
  return bytes.narrow(0, 0, usable).view(t.scalar_type())
      .as_strided(t.sizes(), t.strides(), t.storage_offset());
}

// A view that reinterprets its storage, read on the host: the bytes as written, viewed as `t`.
at::Tensor reinterpreted_to_cpu(const at::Tensor& t) {
  return host_view(storage_bytes_to_cpu(t), t).clone();
}

// True when writing `self` in a program is impossible: it views its storage's buffer with
// another dtype and covers only part of it (x.view(torch.int16)[2:6] of a float32 tensor).
bool needs_host_write(const at::Tensor& self) {
  device::BufferPtr buf;
  std::vector<int64_t> dims;
  shlo::ElementType dtype;
  device::handle_of(self)->snapshot(&buf, &dims, &dtype);
  return buf && dtype != lowering::to_element_type(self.scalar_type()) && !covers_storage(self);
}

// Writes `src` (a host tensor) through `self` on the host, then puts the storage's bytes back
// in its buffer's own element type, so every other view of the storage reads them unchanged.
void host_write(const at::Tensor& self, const at::Tensor& src) {
  auto* handle = device::handle_of(self);
  shlo::ElementType dtype = handle->dtype();
  at::Tensor bytes = storage_bytes_to_cpu(self);
  host_view(bytes, self).copy_(src);
  int64_t n = bytes.numel() / element_bytes(dtype);
  handle->set_buffer(upload(bytes.data_ptr(), {n}, dtype, self.device().index()), {n}, dtype);
}

at::Tensor host_copy(const at::Tensor& src) {
  if (src.numel() > 0 && reinterprets_storage(src)) return reinterpreted_to_cpu(src);
  return to_cpu(src);
}

at::Tensor to_device(const at::Tensor& src, int device) {
  if (reinterprets_storage(src)) {
    at::Tensor host = reinterpreted_to_cpu(src);
    return wrap_buffer(upload(host.data_ptr(), host.sizes().vec(),
                              lowering::to_element_type(host.scalar_type()), device),
                       host.sizes(), host.scalar_type(), device);
  }
  device::BufferPtr buf = contiguous_buffer(src);
  try {
    auto moved = buf->copy_to_device(runtime::get().device(device));
    runtime::metrics().d2d_transfers++;
    return wrap_buffer(device::BufferPtr(std::move(moved)), src.sizes(), src.scalar_type(), device);
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(false, "torchtpu: copy between tpu devices failed: ", e.what());
  }
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.numel() == 0) return self;
  if (self.is_privateuseone() && needs_host_write(self)) {
    TORCH_CHECK(src.is_privateuseone() || src.device().is_cpu(), "torchtpu: cannot copy from ",
                src.device(), " to ", self.device());
    host_write(self, src.is_privateuseone() ? host_copy(src) : src);
    return self;
  }
  if (self.is_privateuseone() && src.is_privateuseone()) {
    at::Tensor s = src;
    if (src.device() != self.device()) s = to_device(src, self.device().index());
    device_copy(self, s, non_blocking);
  } else if (self.is_privateuseone()) {
    TORCH_CHECK(src.device().is_cpu(), "torchtpu: cannot copy from ", src.device(), " to ",
                self.device());
    at::Tensor host = src.to(self.scalar_type()).expand(self.sizes()).contiguous();
    int dev = self.device().index();
    device::BufferPtr buf =
        upload(host.data_ptr(), self.sizes().vec(), lowering::to_element_type(self.scalar_type()), dev);
    if (covers_storage(self)) {
      device::handle_of(self)->set_buffer(std::move(buf), self.sizes().vec(),
                                          lowering::to_element_type(self.scalar_type()));
    } else {
      device_copy(self, wrap_buffer(std::move(buf), self.sizes(), self.scalar_type(), dev),
                  non_blocking);
    }
  } else {
    TORCH_CHECK(src.is_privateuseone(), "torchtpu: unexpected copy from ", src.device(), " to ",
                self.device());
    self.copy_(host_copy(src));
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) { return host_copy(self).item(); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("copy_", copy_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

// A contiguous copy of any view; the runtime launches it to materialize views for the host.
TORCH_LIBRARY(torchtpu, m) { m.def("contiguous_copy(Tensor self) -> Tensor"); }

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("contiguous_copy", [](const at::Tensor& self) {
    return at::empty(self.sizes(), self.options());
  });
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("contiguous_copy",
         torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

// The views are already gathered when a lowering sees its inputs: both are identities.
TORCHTPU_LOWERING("torchtpu::contiguous_copy",
                  [](lowering::LoweringContext& ctx) -> std::vector<lowering::Value> {
                    return {ctx.tensor(0)};
                  });

TORCHTPU_LOWERING("aten::copy", [](lowering::LoweringContext& ctx) -> std::vector<lowering::Value> {
  lowering::Value src = ctx.tensor(1);
  if (shlo::is_float(src.dtype()) && ctx.out_type().dtype == shlo::ElementType::kU8) {
    // PyTorch casts floats to uint8 through int64 (c10::static_cast_with_inter_type), so
    // -3.7 becomes 253; a direct convert would saturate to 0.
    src = ctx.b.convert(src, shlo::ElementType::kS64);
  }
  return {lowering::coerce(ctx.b, src, ctx.out_type())};
});

}  // namespace
}  // namespace torchtpu::aten
