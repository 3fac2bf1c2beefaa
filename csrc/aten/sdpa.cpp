// scaled_dot_product_attention with an attn_mask and is_causal=True together. PyTorch documents
// the pair as an error and its math kernel raises it, but the CPU's flash kernel (which the CPU
// picks for 4-D inputs without dropout) applies both: the causal mask (top-left aligned, as
// math's tril) and the given one. tpu has no fused SDPA kernel, so PyTorch sends every tpu call to
// math, and code that ran on the CPU raised on tpu (issue 32). Where the CPU's flash kernel would
// take the call, this folds the causal mask into the given one and runs the composite with
// is_causal=False; anything else reaches the composite unchanged (the CPU's math raises there
// too). Registered for AutogradPrivateUse1 (the composite's own entry for tpu tensors; it calls
// the composite directly, so autograd still differentiates its ops) and for PrivateUse1
// (inference mode, where autograd keys are skipped).
#include <ATen/ATen.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <torch/library.h>

#include <limits>
#include <optional>

namespace torchtpu::aten {
namespace {

// The cases the CPU's SDPA backend choice sends to its flash kernel with a mask and is_causal
// (sdp_utils_cpp.cpp: dense 4-D inputs, no dropout); the others raise there.
bool cpu_would_fold(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    double dropout_p) {
  return dropout_p == 0.0 && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && !q.is_nested();
}

at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                std::optional<double> scale, bool enable_gqa) {
  std::optional<at::Tensor> mask = attn_mask;
  if (is_causal && mask && mask->defined() && cpu_would_fold(q, k, v, dropout_p)) {
    at::Tensor causal = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).tril();
    mask = mask->scalar_type() == at::kBool
               ? mask->logical_and(causal)
               : mask->masked_fill(causal.logical_not(), -std::numeric_limits<double>::infinity());
    is_causal = false;
  }
  return at::native::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale,
                                                  enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("scaled_dot_product_attention", TORCH_FN(sdpa));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("scaled_dot_product_attention", TORCH_FN(sdpa)); }

}  // namespace
}  // namespace torchtpu::aten
