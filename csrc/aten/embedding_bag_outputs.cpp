// _embedding_bag's extra outputs (offset2bag, bag_size, max_indices) as the CPU kernel returns
// them. PyTorch's meta kernel sizes them one way for every mode; the CPU kernel fills them per
// mode: for "sum" an empty offset2bag (on its fast path, see cpu_fast_path) and zeros for bag_size
// and max_indices; for "mean" max_indices is a copy of bag_size; for "max" an empty bag's index is
// 0. Our backward lowerings recompute the bags from the offsets and read only max_indices and
// bag_size (mode "max"), so the CPU's forms feed them as well; code that reads these outputs (a
// conformance suite did) sees the CPU's shapes and values. Eager only: compiled graphs keep the
// meta kernel's shapes, as their fake tensors do.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

constexpr int64_t kSum = 0, kMean = 1;

// Whether the CPU sums the bags on its fast path (is_fast_path in EmbeddingBag.cpp), the one
// case where its "sum" mode leaves offset2bag empty: a float, half or bfloat16 weight with
// unit stride along the embedding, per-sample weights (if any) with unit stride, and no
// padding_idx. Otherwise offset2bag holds each index's bag, as the lowering computes it (a
// float64 or transposed weight gave (0,) on tpu where the CPU gives one entry per index).
bool cpu_fast_path(const at::Tensor& weight, const c10::IValue& per_sample_weights,
                   int64_t padding_idx) {
  const at::ScalarType t = weight.scalar_type();
  bool fast = (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) && weight.stride(1) == 1 &&
              padding_idx < 0;
  if (fast && per_sample_weights.isTensor() && per_sample_weights.toTensor().defined()) {
    fast = per_sample_weights.toTensor().stride(0) == 1;
  }
  return fast;
}

void embedding_bag_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - op.schema().arguments().size();
  // (weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
  //  include_last_offset, padding_idx)
  const int64_t mode = s[first + 4].toInt();
  const int64_t padding_idx = s[first + 8].isNone() ? -1 : s[first + 8].toInt();
  const bool fast_path = cpu_fast_path(s[first].toTensor(), s[first + 6], padding_idx);
  const int64_t n_offsets = s[first + 2].toTensor().numel();
  tpu_boxed_kernel(op, stack);
  const size_t r = s.size() - 4;
  const at::Tensor out = s[r].toTensor();
  const int64_t count = out.size(0);
  const bool forward_only = op.schema().name() == "aten::_embedding_bag_forward_only";
  if (mode == kSum) {
    // _embedding_bag_forward_only sizes them like offsets (one more with include_last_offset).
    const int64_t n = forward_only ? n_offsets : count;
    at::Tensor zeros = at::zeros({n}, out.options().dtype(s[r + 2].toTensor().scalar_type()));
    if (fast_path) {
      s[r + 1] = at::empty({0}, s[r + 1].toTensor().options());
    }
    s[r + 2] = zeros;
    s[r + 3] = zeros.clone();
  } else if (mode == kMean) {
    at::Tensor bag_size = s[r + 2].toTensor().narrow(0, 0, count).clone();
    s[r + 2] = bag_size;
    s[r + 3] = bag_size.clone();
  } else {
    // "max": bag_size has one entry per bag; an empty bag's max index is 0, not -1 (the
    // backward lowering skips empty bags by bag_size).
    at::Tensor max_indices = s[r + 3].toTensor();
    s[r + 2] = s[r + 2].toTensor().narrow(0, 0, count).clone();
    s[r + 3] = max_indices.clamp_min(0);
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_embedding_bag", torch::CppFunction::makeFromBoxedFunction<&embedding_bag_kernel>());
  m.impl("_embedding_bag_forward_only",
         torch::CppFunction::makeFromBoxedFunction<&embedding_bag_kernel>());
}

}  // namespace
}  // namespace torchtpu::aten
