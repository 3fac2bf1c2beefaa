// copy_ between host and tpu (and across tpu devices), .item(), and the tiny internal ops the
// runtime itself launches.
#include "aten/copy.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/conj_physical.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/neg.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"
#include "exec/host_transfer.h"
#include "lowering/lowering.h"
#include "lowering/strided.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torchtpu::aten {

at::Tensor resolve_bits(const at::Tensor& t) {
  at::Tensor s = t;
  if (s.is_conj()) s = at::conj_physical(at::_conj(s));
  if (s.is_neg()) s = at::neg(at::_neg_view(s));
  return s;
}

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

at::Tensor to_device(const at::Tensor& src, int device) {
  device::BufferPtr buf = exec::contiguous_buffer(src);
  try {
    auto moved = buf->copy_to_device(runtime::get().device(device));
    runtime::metrics().d2d_transfers++;
    return exec::wrap_buffer(device::BufferPtr(std::move(moved)), src.sizes(), src.scalar_type(),
                             device);
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(false, "torchtpu: copy between tpu devices failed: ", e.what());
  }
}

// copy_'s aliasing rules, as PyTorch's copy_impl applies them to CPU and CUDA tensors.
bool same_data(const at::Tensor& self, const at::Tensor& src) {
  return self.is_same(src) ||
         (self.is_alias_of(src) && self.storage_offset() == src.storage_offset() &&
          self.strides().equals(src.strides()) && self.sizes().equals(src.sizes()) &&
          self.scalar_type() == src.scalar_type());
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.numel() == 0 || same_data(self, src)) return self;
  if (self.is_conj() || self.is_neg() || src.is_conj() || src.is_neg()) {
    // Like CPU's copy_: self's storage receives the values that read back through its own bits
    // as src's logical values.
    if (self.is_conj() == src.is_conj() && self.is_neg() == src.is_neg() &&
        self.is_privateuseone() == src.is_privateuseone()) {
      at::Tensor d = self, s = src;
      if (self.is_conj()) d = at::_conj(d), s = at::_conj(s);
      if (self.is_neg()) d = at::_neg_view(d), s = at::_neg_view(s);
      return copy_(d, s, non_blocking), self;
    }
    at::Tensor s = src.is_privateuseone() ? resolve_bits(src) : src.resolve_conj().resolve_neg();
    at::Tensor d = self;
    if (self.is_conj()) d = at::_conj(d), s = s.conj();
    if (self.is_neg()) d = at::_neg_view(d), s = s._neg_view();
    if (s.is_privateuseone())
      s = resolve_bits(s);
    else
      s = s.resolve_conj().resolve_neg();
    copy_(d, s, non_blocking);
    return self;
  }
  if (self.is_privateuseone()) {
    at::assert_no_internal_overlap(self);
    if (src.is_privateuseone()) at::assert_no_partial_overlap(self, src);
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
    std::vector<int64_t> dims = device::buffer_dims(self.sizes());
    device::BufferPtr buf = exec::upload_dense(host, dev);
    if (covers_storage(self)) {
      device::handle_of(self)->set_buffer(std::move(buf), std::move(dims),
                                          lowering::to_element_type(self.scalar_type()));
    } else {
      device_copy(self, exec::wrap_buffer(std::move(buf), self.sizes(), self.scalar_type(), dev),
                  non_blocking);
    }
  } else {
    TORCH_CHECK(src.is_privateuseone(), "torchtpu: unexpected copy from ", src.device(), " to ",
                self.device());
    self.copy_(exec::to_cpu(src));
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

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return exec::to_cpu(resolve_bits(self)).item();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("copy_", copy_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

// A contiguous copy of any view; the runtime launches it to materialize views for the host.
TORCH_LIBRARY(torchtpu, m) { m.def("contiguous_copy(Tensor self) -> Tensor"); }

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("contiguous_copy",
         [](const at::Tensor& self) { return at::empty(self.sizes(), self.options()); });
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("contiguous_copy", torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

// The views are already gathered when a lowering sees its inputs: both are identities.
TORCHTPU_LOWERING(
    "torchtpu::contiguous_copy",
    [](lowering::LoweringContext& ctx) -> std::vector<lowering::Value> { return {ctx.tensor(0)}; },
    lowering::kComplex);

std::vector<lowering::Value> lower_copy(lowering::LoweringContext& ctx) {
  lowering::Value src = ctx.tensor(1);
  if (shlo::is_float(src.dtype()) && ctx.out_type().dtype == shlo::ElementType::kU8) {
    // PyTorch casts floats to uint8 through int64 (c10::static_cast_with_inter_type), so
    // -3.7 becomes 253; a direct convert would saturate to 0.
    src = ctx.b.convert(src, shlo::ElementType::kS64);
  }
  return {lowering::coerce(ctx.b, src, ctx.out_type())};
}

// Eager copy_ lowers its functional form and writes through the destination view; a compiled
// graph keeps copy_ itself, for a mutated graph input.
TORCHTPU_LOWERING("aten::copy", lower_copy, lowering::kComplex | lowering::kElementwise);
TORCHTPU_LOWERING("aten::copy_", lower_copy,
                  lowering::kGraphOnly | lowering::kComplex | lowering::kOverwritesSelf);

}  // namespace

void copy_from_lent_host(const at::Tensor& self, const at::Tensor& host) {
  if (!self.is_privateuseone() || self.is_conj() || self.is_neg() || !host.device().is_cpu() ||
      !host.is_contiguous() || host.is_conj() || host.is_neg() || host.sizes() != self.sizes() ||
      host.scalar_type() != self.scalar_type()) {
    at::Tensor s = self;
    copy_(s, host, false);
    return;
  }
  if (self.numel() == 0) return;
  at::assert_no_internal_overlap(self);
  int dev = self.device().index();
  device::BufferPtr buf = exec::upload_lent(host, dev);
  if (covers_storage(self)) {
    device::handle_of(self)->set_buffer(std::move(buf), device::buffer_dims(self.sizes()),
                                        lowering::to_element_type(self.scalar_type()));
  } else {
    device_copy(self, exec::wrap_buffer(std::move(buf), self.sizes(), self.scalar_type(), dev),
                false);
  }
}

}  // namespace torchtpu::aten
