// torch._grouped_mm / torch.nn.functional.grouped_mm on tpu. PyTorch's meta kernel carries the
// CUDA kernel's limits (bf16 only, 16-byte aligned strides), which the XLA lowering does not
// have: Transformers sends tpu MoE experts through grouped_mm in every dtype. So the tpu kernel
// of aten::_grouped_mm checks the shapes itself and runs torchtpu::grouped_mm, which has the
// same schema, a meta kernel without those limits, and aten::_grouped_mm's lowering
// (lowering/grouped_mm.cpp). Autograd stays aten::_grouped_mm's (its backward calls it again).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def(
      "grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, "
      "ScalarType? out_dtype=None) -> Tensor");
}

// The result of grouped_mm, with the checks every backend makes (ranks, contraction sizes,
// dtypes, offs).
at::Tensor grouped_mm_meta(const at::Tensor& a, const at::Tensor& b,
                           const std::optional<at::Tensor>& offs,
                           const std::optional<at::Tensor>& bias,
                           std::optional<c10::ScalarType> out_dtype) {
  TORCH_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3),
              "grouped_mm: multiplicands must be 2D or 3D but got mat_a.dim()=", a.dim(),
              " and mat_b.dim()=", b.dim());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "grouped_mm: mat_a and mat_b must have the ",
              "same dtype, got ", a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(at::isFloatingType(a.scalar_type()),
              "grouped_mm: expected floating-point inputs, got ", a.scalar_type());
  TORCH_CHECK(a.size(-1) == b.size(-2), "grouped_mm: contraction dimension of mat_a (", a.size(-1),
              ") and mat_b (", b.size(-2), ") must match");
  const bool has_offs = offs.has_value() && offs->defined();
  const bool both_3d = a.dim() == 3 && b.dim() == 3;
  TORCH_CHECK(has_offs != both_3d,
              both_3d ? "grouped_mm: offs must not be given when both operands are 3D"
                      : "grouped_mm: offs is required when an operand is 2D");
  if (has_offs) {
    TORCH_CHECK(offs->dim() == 1 && offs->scalar_type() == at::kInt,
                "grouped_mm: offs must be a 1D int32 tensor, got ", offs->dim(), "D ",
                offs->scalar_type());
  }
  if (both_3d) {
    TORCH_CHECK(a.size(0) == b.size(0), "grouped_mm: batch sizes of mat_a (", a.size(0),
                ") and mat_b (", b.size(0), ") must match");
  } else if (a.dim() == 3) {
    TORCH_CHECK(offs->size(0) == a.size(0), "grouped_mm: offs has ", offs->size(0),
                " groups but mat_a has ", a.size(0));
  } else if (b.dim() == 3) {
    TORCH_CHECK(offs->size(0) == b.size(0), "grouped_mm: offs has ", offs->size(0),
                " groups but mat_b has ", b.size(0));
  }
  std::vector<int64_t> sizes;
  if (both_3d) {
    sizes = {a.size(0), a.size(1), b.size(2)};
  } else if (a.dim() == 2 && b.dim() == 2) {
    sizes = {offs->size(0), a.size(0), b.size(1)};
  } else if (a.dim() == 2) {
    sizes = {a.size(0), b.size(2)};
  } else {
    sizes = {a.size(1), b.size(1)};
  }
  (void)bias;
  return at::empty(sizes, a.options().dtype(out_dtype.value_or(a.scalar_type())));
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) { m.impl("grouped_mm", grouped_mm_meta); }

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("grouped_mm", torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

at::Tensor grouped_mm_kernel(const at::Tensor& a, const at::Tensor& b,
                             const std::optional<at::Tensor>& offs,
                             const std::optional<at::Tensor>& bias,
                             std::optional<c10::ScalarType> out_dtype) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("torchtpu::grouped_mm", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            const std::optional<at::Tensor>&, std::optional<c10::ScalarType>)>();
  return op.call(a, b, offs, bias, out_dtype);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_grouped_mm", grouped_mm_kernel); }

}  // namespace
}  // namespace torchtpu::aten
