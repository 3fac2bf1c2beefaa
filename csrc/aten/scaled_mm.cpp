// torch._scaled_mm on tpu. PyTorch's meta kernel, run on meta tensors, applies CUDA's limits
// (self row-major, mat2 column-major, sizes multiples of 16), which neither the CPU nor the XLA
// lowering has. So the tpu kernels of aten::_scaled_mm(.out) make the CPU kernel's checks (same
// messages and exception types) and run torchtpu::scaled_mm, which has the same schema, a meta
// kernel without CUDA's limits, and aten::_scaled_mm's lowering (lowering/scaled_mm.cpp).
// Compiled graphs lower aten::_scaled_mm directly (PyTorch's fake-tensor meta kernel skips the
// CUDA checks for a tpu device).
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def(
      "scaled_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
      "Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False) "
      "-> Tensor");
  m.def(
      "scaled_mm_v2(Tensor self, Tensor mat2, Tensor[] scale_a, int[] recipe_a, int[] swizzle_a, "
      "Tensor[] scale_b, int[] recipe_b, int[] swizzle_b, Tensor? bias, ScalarType? out_dtype, "
      "int[] contraction_dim=[], bool use_fast_accum=False) -> Tensor");
}

bool is_tensorwise(const at::Tensor& t, const at::Tensor& scale) {
  return c10::isFloat8Type(t.scalar_type()) && scale.scalar_type() == at::kFloat &&
         scale.numel() == 1;
}

bool is_rowwise(const at::Tensor& t, const at::Tensor& scale) {
  return c10::isFloat8Type(t.scalar_type()) && scale.scalar_type() == at::kFloat &&
         scale.dim() == 2 && scale.size(0) == t.size(0) && scale.size(1) == 1 &&
         scale.is_contiguous();
}

// The CPU kernel's checks (aten/src/ATen/native/Blas.cpp, _scaled_mm_out_cpu and its emulation),
// in its order, so that bad input raises what it raises on the CPU.
void check_scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& scale_result) {
  TORCH_CHECK(a.dim() == 2, "mat1 must be a matrix");
  TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix");
  const at::Tensor bt = b.t(), sbt = scale_b.t();
  bool tensorwise = is_tensorwise(a, scale_a) && is_tensorwise(bt, sbt);
  bool rowwise = is_rowwise(a, scale_a) && is_rowwise(bt, sbt);
  TORCH_CHECK_VALUE(
      tensorwise || rowwise,
      "Invalid scaling configuration.\n"
      "- For TensorWise scaling, a and b should be float8, scales should be float and "
      "singletons.\n"
      "- For RowWise scaling, a and b should be float8, scales should be float, scale_a "
      "should be (",
      a.size(0), ", 1) and scale_b should be (1, ", b.size(1),
      "), and both should be contiguous.\nGot mat_a.dtype()=", a.scalar_type(),
      ", scale_a.dtype()=", scale_a.scalar_type(), ", scale_a.size()=", scale_a.sizes(),
      ", scale_a.stride()=", scale_a.strides(), ", mat_b.dtype()=", b.scalar_type(),
      ", scale_b.dtype()=", scale_b.scalar_type(), ", scale_b.size()=", scale_b.sizes(),
      " and scale_b.stride()=", scale_b.strides());
  TORCH_CHECK(a.size(1) == b.size(0), "mat_a and mat_b shapes cannot be multiplied (", a.size(0),
              "x", a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  TORCH_CHECK(!scale_result || !scale_result->defined() ||
                  (scale_result->numel() == 1 && scale_result->scalar_type() == at::kFloat),
              "scale_result must be a float scalar");
  TORCH_CHECK(!bias || !bias->defined() || bias->numel() == b.size(1), "Bias must be size ",
              b.size(1), " but got ", bias->numel());
}

// torch.nn.functional.scaled_mm's op. The recipes the CPU has (tensor-wise and row-wise, one
// scale per operand, no swizzle) with its checks; block-wise recipes (MX formats) are refused.
constexpr int64_t kTensorWise = 0, kRowWise = 1;

void check_scaled_mm_v2(const at::Tensor& a, const at::Tensor& b, at::TensorList scale_a,
                        at::IntArrayRef recipe_a, at::IntArrayRef swizzle_a, at::TensorList scale_b,
                        at::IntArrayRef recipe_b, at::IntArrayRef swizzle_b,
                        const std::optional<at::Tensor>& bias, at::IntArrayRef contraction_dim) {
  TORCH_CHECK_VALUE(a.dim() == 2, "mat_a must be a matrix");
  TORCH_CHECK_VALUE(b.dim() == 2, "mat_b must be a matrix");
  if (!contraction_dim.empty()) {
    TORCH_CHECK_VALUE(contraction_dim.size() == 2, "contraction_dim must have exactly 2 elements");
    TORCH_CHECK_VALUE(contraction_dim[0] == 1 && contraction_dim[1] == 0,
                      "_scaled_mm_v2: only contraction_dim=[1, 0] is supported on tpu, got ",
                      contraction_dim);
  }
  TORCH_CHECK_VALUE(a.size(1) == b.size(0), "mat_a and mat_b shapes cannot be multiplied (",
                    a.size(0), "x", a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  const bool has_bias = bias && bias->defined();
  TORCH_CHECK_VALUE(!has_bias || bias->numel() == b.size(1), "Bias must be size ", b.size(1),
                    " but got ", has_bias ? bias->numel() : 0);
  if (has_bias) {
    TORCH_CHECK_VALUE(bias->scalar_type() == at::kFloat || bias->scalar_type() == at::kBFloat16 ||
                          bias->scalar_type() == at::kHalf,
                      "Bias must be Float32 or BFloat16 or Half, but got ", bias->scalar_type());
  }
  auto no_swizzle = [](at::IntArrayRef s) { return s.empty() || s[0] == 0; };
  TORCH_CHECK_VALUE(no_swizzle(swizzle_a) && no_swizzle(swizzle_b),
                    "_scaled_mm_v2: swizzled scales are not supported on tpu");
  auto one = [](at::TensorList s, at::IntArrayRef r, int64_t recipe) {
    return s.size() == 1 && r.size() == 1 && r[0] == recipe;
  };
  bool ok = false;
  if (one(scale_a, recipe_a, kTensorWise) && one(scale_b, recipe_b, kTensorWise)) {
    ok = is_tensorwise(a, scale_a[0]) && is_tensorwise(b, scale_b[0]);
  } else if (one(scale_a, recipe_a, kRowWise) && one(scale_b, recipe_b, kRowWise)) {
    // The CPU accepts the recipe on dtypes alone, then checks the scales' shapes.
    const at::Tensor &sa = scale_a[0], &sb = scale_b[0];
    ok = c10::isFloat8Type(a.scalar_type()) && c10::isFloat8Type(b.scalar_type()) &&
         sa.scalar_type() == at::kFloat && sb.scalar_type() == at::kFloat;
    if (ok) {
      TORCH_CHECK_VALUE(sa.dim() == 2 && sa.size(0) == a.size(0) && sa.size(1) == 1,
                        "scale_a must have shape [", a.size(0), ", 1], got [", sa.sizes(), "]");
      TORCH_CHECK_VALUE(sb.numel() == b.size(1), "scale_b must have ", b.size(1),
                        " Float elements, got ", sb.numel());
      TORCH_CHECK_VALUE(sb.dim() == 2 && sb.size(0) == 1,
                        "_scaled_mm_v2: row-wise scale_b must have shape [1, ", b.size(1),
                        "], got [", sb.sizes(), "]");
      TORCH_CHECK_VALUE(sa.stride(1) == 1, "expected scale_a.stride(1) to be 1, but got ",
                        sa.stride(1));
      TORCH_CHECK_VALUE(sb.stride(1) == 1, "expected scale_b.stride(1) to be 1, but got ",
                        sb.stride(1));
    }
  }
  TORCH_CHECK_VALUE(ok,
                    "Invalid scaling configuration.\n"
                    "- For TensorWise scaling, a and b should be float8, scales should be float "
                    "and singletons.\n"
                    "- For RowWise scaling, a and b should be float8, scales should be float, "
                    "scale_a should be (",
                    a.size(0), ", 1) and scale_b should be (1, ", b.size(1),
                    "), and both should be contiguous.\n"
                    "tpu supports these two recipes, one scale tensor per operand; got recipes ",
                    recipe_a, " and ", recipe_b, ", mat_a.dtype()=", a.scalar_type(),
                    ", mat_b.dtype()=", b.scalar_type());
}

// Each op's meta kernel (kMeta: checks and sizes) and tpu kernel (checks, then the lowered
// torchtpu op) are one function, so the two can never check differently.
template <bool kMeta>
at::Tensor scaled_mm_impl(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                          const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                          const std::optional<at::Tensor>& scale_result,
                          std::optional<c10::ScalarType> out_dtype, bool use_fast_accum) {
  (void)use_fast_accum;  // a meta kernel has no use for it
  check_scaled_mm(a, b, scale_a, scale_b, bias, scale_result);
  if constexpr (kMeta) {
    return at::empty({a.size(0), b.size(1)},
                     a.options().dtype(out_dtype.value_or(a.scalar_type())));
  } else {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("torchtpu::scaled_mm", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const at::Tensor&, const std::optional<at::Tensor>&,
                                           const std::optional<at::Tensor>&,
                                           std::optional<c10::ScalarType>, bool)>();
    return op.call(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum);
  }
}

template <bool kMeta>
at::Tensor scaled_mm_v2_impl(const at::Tensor& a, const at::Tensor& b, at::TensorList scale_a,
                             at::IntArrayRef recipe_a, at::IntArrayRef swizzle_a,
                             at::TensorList scale_b, at::IntArrayRef recipe_b,
                             at::IntArrayRef swizzle_b, const std::optional<at::Tensor>& bias,
                             std::optional<c10::ScalarType> out_dtype,
                             at::IntArrayRef contraction_dim, bool use_fast_accum) {
  (void)use_fast_accum;  // a meta kernel has no use for it
  check_scaled_mm_v2(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias,
                     contraction_dim);
  c10::ScalarType dtype = out_dtype.value_or(a.scalar_type());
  if constexpr (kMeta) {
    return at::empty({a.size(0), b.size(1)}, a.options().dtype(dtype));
  } else {
    if (a.size(0) == 0 || a.size(1) == 0 || b.size(1) == 0) {
      // As on the CPU: an empty product is zeros, without the bias.
      return at::zeros({a.size(0), b.size(1)}, a.options().dtype(dtype));
    }
    static auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("torchtpu::scaled_mm_v2", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, at::TensorList, at::IntArrayRef,
                              at::IntArrayRef, at::TensorList, at::IntArrayRef, at::IntArrayRef,
                              const std::optional<at::Tensor>&, std::optional<c10::ScalarType>,
                              at::IntArrayRef, bool)>();
    return op.call(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias,
                   out_dtype, contraction_dim, use_fast_accum);
  }
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("scaled_mm", scaled_mm_impl<true>);
  m.impl("scaled_mm_v2", scaled_mm_v2_impl<true>);
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("scaled_mm", torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
  m.impl("scaled_mm_v2", torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

at::Tensor& scaled_mm_v2_out_kernel(const at::Tensor& a, const at::Tensor& b,
                                    at::TensorList scale_a, at::IntArrayRef recipe_a,
                                    at::IntArrayRef swizzle_a, at::TensorList scale_b,
                                    at::IntArrayRef recipe_b, at::IntArrayRef swizzle_b,
                                    const std::optional<at::Tensor>& bias,
                                    std::optional<c10::ScalarType> out_dtype,
                                    at::IntArrayRef contraction_dim, bool use_fast_accum,
                                    at::Tensor& out) {
  TORCH_CHECK_VALUE(!out_dtype || *out_dtype == out.scalar_type(),
                    "out_dtype must match output matrix type");
  at::Tensor r =
      scaled_mm_v2_impl<false>(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b,
                               bias, out.scalar_type(), contraction_dim, use_fast_accum);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

at::Tensor& scaled_mm_out_kernel(const at::Tensor& a, const at::Tensor& b,
                                 const at::Tensor& scale_a, const at::Tensor& scale_b,
                                 const std::optional<at::Tensor>& bias,
                                 const std::optional<at::Tensor>& scale_result,
                                 std::optional<c10::ScalarType> out_dtype, bool use_fast_accum,
                                 at::Tensor& out) {
  TORCH_CHECK_VALUE(!out_dtype || *out_dtype == out.scalar_type(),
                    "out_dtype must match output matrix type");
  // The CPU computes in out's dtype when out_dtype is not given.
  at::Tensor r = scaled_mm_impl<false>(a, b, scale_a, scale_b, bias, scale_result,
                                       out.scalar_type(), use_fast_accum);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_mm", scaled_mm_impl<false>);
  m.impl("_scaled_mm.out", scaled_mm_out_kernel);
  m.impl("_scaled_mm_v2", scaled_mm_v2_impl<false>);
  m.impl("_scaled_mm_v2.out", scaled_mm_v2_out_kernel);
}

}  // namespace
}  // namespace torchtpu::aten
