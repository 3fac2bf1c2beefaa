// torchtpu::ragged_paged_attention: attention of a mixed prefill/decode batch over a paged KV
// cache, with the step's K/V written into the cache, as ONE op (lowered in
// lowering/paged_attention.cpp). vLLM's tpu plugin (integrations/vllm) calls it from its
// attention backend, so a compiled step holds the attention of every layer and the cache writes.
// It is functional: it returns the attention output and the updated cache; the caller writes the
// cache back (`kv_cache.copy_(new_cache)`), which a compiled graph turns into an in-place update
// of its donated cache input. The meta kernel checks every shape, so bad metadata raises a
// ValueError at the call (eager) or while tracing (compiled), never a wrong program.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

#include "aten/boxed_kernel.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def(
      "ragged_paged_attention(Tensor query, Tensor? key, Tensor? value, Tensor kv_cache, "
      "Tensor slot_mapping, Tensor block_tables, Tensor seq_lens, Tensor query_start_loc, "
      "float scale, float soft_cap=0., int sliding_window=0, Tensor? sinks=None) -> "
      "(Tensor, Tensor)");
}

constexpr const char* kOp = "torchtpu.ragged_paged_attention: ";

void check_index_vector(const at::Tensor& t, const char* name, int64_t dim, int64_t size0) {
  TORCH_CHECK_VALUE(t.dim() == dim, kOp, name, " must be ", dim, "-D, got ", t.sizes());
  TORCH_CHECK_VALUE(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, kOp, name,
                    " must be int32 or int64, got ", t.scalar_type());
  TORCH_CHECK_VALUE(size0 < 0 || t.size(0) == size0, kOp, name, " has ", t.size(0),
                    " rows, expected ", size0);
}

std::tuple<at::Tensor, at::Tensor> ragged_paged_attention_meta(
    const at::Tensor& query, const std::optional<at::Tensor>& key,
    const std::optional<at::Tensor>& value, const at::Tensor& kv_cache,
    const at::Tensor& slot_mapping, const at::Tensor& block_tables, const at::Tensor& seq_lens,
    const at::Tensor& query_start_loc, double scale, double soft_cap, int64_t sliding_window,
    const std::optional<at::Tensor>& sinks) {
  TORCH_CHECK_VALUE(query.dim() == 3, kOp, "query must be [tokens, heads, head_size], got ",
                    query.sizes());
  TORCH_CHECK_VALUE(at::isFloatingType(query.scalar_type()), kOp,
                    "query must be floating point, got ", query.scalar_type());
  TORCH_CHECK_VALUE(kv_cache.dim() == 4, kOp,
                    "kv_cache must be [blocks, block_size, kv_heads, head_size + head_size_v], "
                    "got ",
                    kv_cache.sizes());
  TORCH_CHECK_VALUE(at::isFloatingType(kv_cache.scalar_type()), kOp,
                    "kv_cache must be floating point, got ", kv_cache.scalar_type());
  const int64_t tokens = query.size(0), heads = query.size(1), dk = query.size(2);
  const int64_t kv_heads = kv_cache.size(2), dv = kv_cache.size(3) - dk;
  TORCH_CHECK_VALUE(kv_heads > 0 && heads % kv_heads == 0, kOp, "query heads (", heads,
                    ") must be a multiple of the cache's kv heads (", kv_heads, ")");
  TORCH_CHECK_VALUE(dv > 0, kOp, "kv_cache's last dim (", kv_cache.size(3), ") must hold the key (",
                    dk, ") and a value head");
  TORCH_CHECK_VALUE(key.has_value() == value.has_value(), kOp,
                    "key and value must both be given or both be None");
  if (key.has_value()) {
    TORCH_CHECK_VALUE(key->sizes() == c10::IntArrayRef({tokens, kv_heads, dk}), kOp,
                      "key must be [", tokens, ", ", kv_heads, ", ", dk, "], got ", key->sizes());
    TORCH_CHECK_VALUE(value->sizes() == c10::IntArrayRef({tokens, kv_heads, dv}), kOp,
                      "value must be [", tokens, ", ", kv_heads, ", ", dv, "], got ",
                      value->sizes());
  }
  check_index_vector(slot_mapping, "slot_mapping", 1, tokens);
  check_index_vector(block_tables, "block_tables", 2, -1);
  const int64_t reqs = block_tables.size(0);
  TORCH_CHECK_VALUE(reqs > 0, kOp, "block_tables needs at least one request row");
  check_index_vector(seq_lens, "seq_lens", 1, reqs);
  check_index_vector(query_start_loc, "query_start_loc", 1, reqs + 1);
  TORCH_CHECK_VALUE(scale > 0, kOp, "scale must be positive, got ", scale);
  TORCH_CHECK_VALUE(soft_cap >= 0, kOp, "soft_cap must be >= 0 (0: none), got ", soft_cap);
  TORCH_CHECK_VALUE(sliding_window >= 0, kOp, "sliding_window must be >= 0 (0: none), got ",
                    sliding_window);
  if (sinks.has_value()) {
    TORCH_CHECK_VALUE(sinks->dim() == 1 && sinks->size(0) == heads, kOp, "sinks must be [", heads,
                      "], got ", sinks->sizes());
    TORCH_CHECK_VALUE(at::isFloatingType(sinks->scalar_type()), kOp,
                      "sinks must be floating point, got ", sinks->scalar_type());
  }
  auto meta = query.options().device(c10::kMeta);
  return {at::empty({tokens, heads, dv}, meta),
          at::empty(kv_cache.sizes(), meta.dtype(kv_cache.scalar_type()))};
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("ragged_paged_attention", ragged_paged_attention_meta);
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("ragged_paged_attention", torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

}  // namespace
}  // namespace torchtpu::aten
