// out= overloads whose PyTorch meta registration cannot be called with their own schema's
// keywords (grid_sampler_3d_backward.out: "unexpected keyword argument 'out0'";
// _adaptive_avg_pool3d_backward.out: "got multiple values for keyword argument 'out'"), so the
// generic out= path, which asks the meta kernel to size the outputs, raised where the CPU
// succeeds. These kernels run the functional overload (lowered, natively) and write its results
// into the out tensors, resized like the CPU's resize_output; a result the functional form leaves
// undefined (output_mask off) leaves its out tensor untouched.
//
// im2col.out and col2im.out run their functional form here too: see their registration.
//
// Out= overloads whose functional form is native but has no lowering-table entry of its own
// (a composite, or a tpu kernel with a data-dependent shape), so the generic out= path found
// nothing to lower and they took the CPU fallback (issue 18): narrow_copy.out and
// masked_select.out run the native functional form here and write the out tensor like the CPU.
#include "aten/out_via_functional.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace torchtpu::aten {

void write_outs_via(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                    const c10::OperatorHandle& functional, size_t n_written) {
  torch::jit::Stack& s = *stack;
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t nouts = schema.returns().size();
  const size_t first = s.size() - nargs;
  std::vector<at::Tensor> outs;
  for (size_t i = first + nargs - nouts; i < s.size(); ++i) outs.push_back(s[i].toTensor());
  torch::jit::Stack call(s.begin() + static_cast<std::ptrdiff_t>(first),
                         s.begin() + static_cast<std::ptrdiff_t>(first + nargs - nouts));
  functional.callBoxed(&call);
  TORCH_INTERNAL_ASSERT(call.size() == nouts, "torchtpu: ", functional.schema().name(),
                        " returned ", call.size(), " values for ", nouts, " out tensors");
  for (size_t i = 0; i < std::min(n_written, nouts); ++i) {
    if (!call[i].isTensor() || !call[i].toTensor().defined()) continue;
    const at::Tensor& r = call[i].toTensor();
    at::native::resize_output(outs[i], r.sizes());
    outs[i].copy_(r);
  }
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(first), s.end());
  for (at::Tensor& t : outs) s.emplace_back(std::move(t));
}

namespace {

// The functional overload of the same name ("" overload), every result written.
void out_via_functional(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  auto functional =
      c10::Dispatcher::singleton().findSchemaOrThrow(schema.name().c_str(), /*overload=*/"");
  write_outs_via(op, stack, functional, schema.returns().size());
}

// narrow_copy.out: the CPU's checks, in its order and with its messages (two are bare
// TORCH_CHECKs, whose message is the expression: the names below keep it the CPU's), its plain
// resize_ (no resize_output warning), then one copy from the narrowed view: a single program
// that gathers the slice on the device. (narrow_copy itself is a composite of narrow + clone.)
at::Tensor& narrow_copy_out(const at::Tensor& self, int64_t dim, c10::SymInt start_,
                            c10::SymInt length_, at::Tensor& output) {
  int64_t start = start_.guard_int(__FILE__, __LINE__);
  const int64_t length = length_.guard_int(__FILE__, __LINE__);
  TORCH_CHECK(self.dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
  TORCH_CHECK(self.dtype() == output.dtype());
  const auto self_sizes = self.sizes();
  if (dim < 0) {
    dim = at::maybe_wrap_dim(dim, static_cast<int64_t>(self_sizes.size()));
  } else {
    TORCH_CHECK(dim < static_cast<int64_t>(self_sizes.size()));
  }
  const int64_t cur_size = self_sizes[static_cast<size_t>(dim)];
  TORCH_CHECK_INDEX(-cur_size <= start && start <= cur_size,
                    "start out of range (expected to be in range of [", -cur_size, ", ", cur_size,
                    "], but got ", start, ")");
  if (start < 0) start += cur_size;
  TORCH_CHECK(length >= 0 && start <= cur_size - length, "start (", start, ") + length (", length,
              ") exceeds dimension size (", cur_size, ").");
  std::vector<int64_t> sizes = self_sizes.vec();
  sizes[static_cast<size_t>(dim)] = length;
  output.resize_(sizes);
  // The CPU kernel writes a non-contiguous `output` as if it were contiguous (its elements land
  // in the wrong places); copy_ honours its strides.
  output.copy_(self.narrow(dim, start, length));
  return output;
}

// masked_select.out: the CPU's checks in its order, then the native masked_select (its count
// program, the one host sync its data-dependent size needs anyway, and the static program) and
// one device copy into `result`, resized with the CPU's resize_output.
at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& result) {
  TORCH_CHECK(mask.scalar_type() == at::ScalarType::Bool,
              "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.scalar_type() == result.scalar_type(),
              "masked_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(result);
  at::assert_no_overlap(result, self);
  at::assert_no_overlap(result, mask);
  at::Tensor selected = at::masked_select(self, mask);
  at::native::resize_output(result, selected.sizes());
  result.copy_(selected);
  return result;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("narrow_copy.out", TORCH_FN(narrow_copy_out));
  m.impl("masked_select.out", TORCH_FN(masked_select_out));
  m.impl("grid_sampler_3d_backward.out",
         torch::CppFunction::makeFromBoxedFunction<&out_via_functional>());
  m.impl("_adaptive_avg_pool3d_backward.out",
         torch::CppFunction::makeFromBoxedFunction<&out_via_functional>());
  // The CPU's im2col/col2im read their input before resizing the output, so out= may be the
  // input itself (F.unfold's out); the generic out= path resized the out tensor, and with it the
  // aliased input, before building the program, which then failed (issue 32).
  m.impl("im2col.out", torch::CppFunction::makeFromBoxedFunction<&out_via_functional>());
  m.impl("col2im.out", torch::CppFunction::makeFromBoxedFunction<&out_via_functional>());
}

}  // namespace
}  // namespace torchtpu::aten
