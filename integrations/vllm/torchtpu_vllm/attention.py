"""Paged attention for vLLM in plain torch ops that torchtpu lowers to XLA (no custom kernel).

KV cache: each layer's logical view is vLLM's [blocks, kv_heads, block_size, K|V] over one int8
buffer; the layout is LBNHC, so one layer's cache is physically [blocks * block_size (slots),
kv_heads, K|V]. A token's key and value are written into its slot (vLLM's slot_mapping) with
index_copy_ on that view (torchtpu writes through views into the shared buffer).

Attention: every request's query tokens are gathered into a padded [requests, max_query, heads,
dim] tensor, its context keys/values are gathered slot by slot through its block-table row,
and one masked softmax attention covers prefill, chunked-prefill continuations, prefix-cache
hits and decode in the same batch (key s is visible to query q of request r iff
s <= position(r, q)). GQA shares each kv head across its query heads; any head size works.
Token counts, request counts, query lengths and context lengths are all padded to buckets, so a
stream of batches reuses few XLA programs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.config import VllmConfig
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheLayout

from .buckets import next_power_of_two, padded_token_count


class TpuPagedAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [
        torch.float32,
        torch.bfloat16,
        torch.float16,
    ]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", "float32", "bfloat16", "float16"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[TpuPagedAttentionImpl]:
        return TpuPagedAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[TpuPagedAttentionMetadataBuilder]:
        return TpuPagedAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int | MultipleOf]:
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any head size: the attention is matmuls over the head dim

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return head_size > 0

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # Slot-major within a layer: a token's K|V for all kv heads is one contiguous row.
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class TpuPagedAttentionMetadata:
    num_actual_tokens: int
    # [padded tokens] int64: the cache slot each token's K|V is written to (0 for padding).
    slot_mapping: torch.Tensor
    # [requests, context_slots] int64: the cache slots of each request's context, in order.
    context_slots: torch.Tensor
    # [requests, max_query] int64: the token row of each padded query (0 for padding).
    query_rows: torch.Tensor
    # [requests, max_query] int64: each query's position in its sequence; -1 for padding.
    query_positions: torch.Tensor
    # [requests, max_query] int64: the token row each query's output goes to; -1 for padding
    # (sent to a scratch row that is dropped).
    output_rows: torch.Tensor


class TpuPagedAttentionMetadataBuilder(AttentionMetadataBuilder[TpuPagedAttentionMetadata]):
    def __init__(
        self,
        kv_cache_spec: AttentionSpec,
        layer_names: list[str],
        vllm_config: VllmConfig,
        device: torch.device,
    ) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.max_num_tokens = vllm_config.scheduler_config.max_num_batched_tokens

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> TpuPagedAttentionMetadata:
        m = common_attn_metadata
        if isinstance(m.causal, torch.Tensor) or not m.causal:
            raise NotImplementedError("the tpu paged attention backend is causal-only")
        num_reqs = m.num_reqs
        num_tokens = m.num_actual_tokens
        device = m.query_start_loc.device
        # Every size below is a bucket, so the per-step programs depend on the batch's shape
        # class, not on its exact token and request counts.
        padded_tokens = padded_token_count(num_tokens, self.max_num_tokens)
        padded_reqs = next_power_of_two(num_reqs)
        max_query = next_power_of_two(m.max_query_len)
        block_table = m.block_table_tensor[:num_reqs]
        num_blocks = next_power_of_two(
            -(-m.max_seq_len // self.block_size), cap=block_table.shape[1]
        )

        starts = m.query_start_loc[:num_reqs].to(torch.int64)
        query_lens = m.query_start_loc[1 : num_reqs + 1].to(torch.int64) - starts
        seq_lens = m.seq_lens[:num_reqs].to(torch.int64)
        if padded_reqs > num_reqs:
            # Padding requests: no queries (length 0), no context.
            extra = padded_reqs - num_reqs
            starts = torch.cat([starts, starts.new_zeros(extra)])
            query_lens = torch.cat([query_lens, query_lens.new_zeros(extra)])
            seq_lens = torch.cat([seq_lens, seq_lens.new_zeros(extra)])
            no_blocks = block_table.new_zeros(extra, block_table.shape[1])
            block_table = torch.cat([block_table, no_blocks])
        q = torch.arange(max_query, device=device, dtype=torch.int64)
        valid = q[None, :] < query_lens[:, None]
        rows = starts[:, None] + q[None, :]
        query_rows = torch.where(valid, rows, 0)
        context_before = (seq_lens - query_lens)[:, None]
        query_positions = torch.where(valid, context_before + q[None, :], -1)
        output_rows = torch.where(valid, rows, -1)

        offsets = torch.arange(self.block_size, device=device, dtype=torch.int64)
        blocks = block_table[:, :num_blocks].to(torch.int64)
        context_slots = (blocks[:, :, None] * self.block_size + offsets).reshape(padded_reqs, -1)

        # Padding tokens write their (ignored) K|V into slot 0: block 0 is vLLM's null block,
        # never handed to a request.
        slot_mapping = m.slot_mapping[:num_tokens].to(torch.int64)
        if padded_tokens > num_tokens:
            pad = slot_mapping.new_zeros(padded_tokens - num_tokens)
            slot_mapping = torch.cat([slot_mapping, pad])
        slot_mapping = torch.clamp(slot_mapping, min=0)

        return TpuPagedAttentionMetadata(
            num_actual_tokens=num_tokens,
            slot_mapping=slot_mapping,
            context_slots=context_slots,
            query_rows=query_rows,
            query_positions=query_positions,
            output_rows=output_rows,
        )


class TpuPagedAttentionImpl(AttentionImpl[TpuPagedAttentionMetadata]):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes: list[float] | None,
        sliding_window: int | None,
        kv_cache_dtype: str,
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
    ) -> None:
        unsupported = {
            "alibi_slopes": alibi_slopes is not None,
            "sliding_window": sliding_window is not None,
            "logits_soft_cap": bool(logits_soft_cap),
            "attention sinks": sinks is not None,
            f"attn_type={attn_type}": attn_type != AttentionType.DECODER,
            f"kv_cache_dtype={kv_cache_dtype}": kv_cache_dtype
            not in ("auto", "float32", "bfloat16", "float16"),
        }
        named = [name for name, bad in unsupported.items() if bad]
        if named:
            raise NotImplementedError(
                "the tpu paged attention backend does not support " + ", ".join(named)
            )
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
            )
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type

    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,  # [tokens, heads, head_size]
        key: torch.Tensor,  # [tokens, kv_heads, head_size]
        value: torch.Tensor,  # [tokens, kv_heads, head_size_v]
        kv_cache: torch.Tensor,  # [blocks, kv_heads, block_size, head_size + head_size_v]
        attn_metadata: TpuPagedAttentionMetadata | None,
        output: torch.Tensor,  # [tokens, heads, head_size_v]
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported on tpu")
        if attn_metadata is None:  # vLLM's profiling/warm-up run without a KV cache
            return output
        md = attn_metadata
        tokens = query.shape[0]
        num_blocks, kv_heads, block_size, width = kv_cache.shape
        dk = self.head_size
        # Slot-major view of this layer's cache (LBNHC): [slots, kv_heads, K|V]. view, never
        # reshape: a copy would silently drop the cache writes below.
        slots = kv_cache.permute(0, 2, 1, 3).view(num_blocks * block_size, kv_heads, width)

        if self.kv_sharing_target_layer_name is None and key is not None:
            written = md.slot_mapping.shape[0]
            if written > tokens:
                raise RuntimeError(f"{written} cache slots for {tokens} tokens")
            new_kv = torch.cat([key[:written], value[:written]], dim=-1).to(slots.dtype)
            slots.index_copy_(0, md.slot_mapping, new_kv)

        reqs, max_query = md.query_rows.shape
        context = slots[md.context_slots]  # [reqs, ctx, kv_heads, K|V]
        k = context[..., :dk].transpose(1, 2)  # [reqs, kv_heads, ctx, dk]
        v = context[..., dk:].transpose(1, 2)  # [reqs, kv_heads, ctx, dv]
        group = self.num_heads // kv_heads
        q = query[md.query_rows]  # [reqs, max_query, heads, dk]
        # GQA: query heads h*group .. h*group+group-1 share kv head h.
        q = q.reshape(reqs, max_query, kv_heads, group, dk).permute(0, 2, 3, 1, 4)
        q = q.reshape(reqs, kv_heads, group * max_query, dk)

        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * self.scale
        ctx = k.shape[2]
        key_pos = torch.arange(ctx, device=scores.device)
        visible = key_pos[None, None, :] <= md.query_positions[:, :, None]  # [reqs, mq, ctx]
        visible = visible[:, None, None, :, :].expand(reqs, 1, group, max_query, ctx)
        visible = visible.reshape(reqs, 1, group * max_query, ctx)
        # A finite floor keeps fully masked (padding) rows free of NaN.
        scores = torch.where(visible, scores, torch.finfo(torch.float32).min)
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v.float())  # [reqs, kv_heads, group*mq, dv]
        dv = out.shape[-1]
        out = out.reshape(reqs, kv_heads, group, max_query, dv).permute(0, 3, 1, 2, 4)
        out = out.reshape(reqs * max_query, self.num_heads, dv).to(output.dtype)

        # Row `tokens` is scratch for the padding queries; padding tokens' rows stay zero.
        rows = md.output_rows.reshape(-1)
        rows = torch.where(rows < 0, tokens, rows)
        result = torch.zeros(
            tokens + 1, self.num_heads, dv, dtype=output.dtype, device=out.device
        )
        result.index_copy_(0, rows, out)
        output.copy_(result[:tokens])
        return output
