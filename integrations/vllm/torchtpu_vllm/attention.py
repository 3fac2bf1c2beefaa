"""vLLM's attention on tpu: one op, torchtpu::ragged_paged_attention (csrc/lowering/
paged_attention.cpp), per layer and step.

The op writes the step's keys and values into the layer's paged KV cache (slot mapping) and
attends every token of a mixed prefill/decode batch to its request's context through the block
table; it returns the output and the updated cache, and `kv_cache.copy_(new_cache)` puts the
update in place. Inside the runner's compiled step (programs.py) that copy is a write into the
program's donated cache input, so the whole step, every layer's attention and cache write
included, is one XLA program. Eagerly it is the op's program and a copy.

KV cache per layer: [blocks, block_size, kv_heads, head_size + head_size_v], allocated by the
runner as one tensor per layer (TpuModelRunner.initialize_kv_cache_tensors). GQA, any head size,
sliding window, logit soft-capping and attention sinks are the op's; ALiBi, encoder and
cross attention, MLA and quantized KV caches raise when the model is built.

The metadata is built on the host by the runner (runner_inputs.py) into the step's one uploaded
buffer; the attention metadata builder below is never called on that path.
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
from vllm.v1.kv_cache_interface import AttentionSpec

SUPPORTED_KV_CACHE_DTYPES = ("auto", "float32", "bfloat16", "float16")


class TpuPagedAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [
        torch.float32,
        torch.bfloat16,
        torch.float16,
    ]
    supported_kv_cache_dtypes: ClassVar[list] = list(SUPPORTED_KV_CACHE_DTYPES)

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
    def get_kv_cache_shape(
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_size: int,
        cache_dtype_str: str = "auto",
    ) -> tuple[int, ...]:
        return (num_blocks, block_size, num_kv_heads, 2 * head_size)

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int | MultipleOf]:
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any head size: the attention is dot products over the head dim

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return head_size > 0

    @classmethod
    def supports_sink(cls) -> bool:
        return True

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class TpuPagedAttentionMetadata:
    """The op's metadata for one step (all device tensors of the step's bucket shapes)."""

    # [tokens] the cache slot of each token's K|V; -1 for padding tokens.
    slot_mapping: torch.Tensor
    # [requests, max_blocks_per_request] each request's cache blocks.
    block_tables: torch.Tensor
    # [requests] tokens in the cache after this step; 0 for padding requests.
    seq_lens: torch.Tensor
    # [requests + 1] where each request's tokens start; padding requests own none.
    query_start_loc: torch.Tensor


class TpuPagedAttentionMetadataBuilder(AttentionMetadataBuilder[TpuPagedAttentionMetadata]):
    """vLLM asks every backend for a builder; the tpu runner prepares the metadata on the host
    itself (runner_inputs.py), so this one is never asked to build."""

    def __init__(
        self,
        kv_cache_spec: AttentionSpec,
        layer_names: list[str],
        vllm_config: VllmConfig,
        device: torch.device,
    ) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> TpuPagedAttentionMetadata:
        raise NotImplementedError(
            "torchtpu_vllm: the tpu model runner builds attention metadata on the host; "
            "vLLM's GPU input preparation is not used on tpu"
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
        **unsupported_kwargs,
    ) -> None:
        unsupported = {
            "alibi_slopes": alibi_slopes is not None,
            f"attn_type={attn_type}": attn_type != AttentionType.DECODER,
            f"kv_cache_dtype={kv_cache_dtype}": kv_cache_dtype not in SUPPORTED_KV_CACHE_DTYPES,
        }
        unsupported.update({k: v is not None for k, v in unsupported_kwargs.items()})
        named = [name for name, bad in unsupported.items() if bad]
        if named:
            raise NotImplementedError(
                "the tpu paged attention backend does not support " + ", ".join(named)
            )
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
            )
        if sinks is not None and tuple(sinks.shape) != (num_heads,):
            raise ValueError(f"attention sinks must have one value per head ({num_heads}), "
                             f"got shape {tuple(sinks.shape)}")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        # vLLM's sliding window W: a token sees itself and the W - 1 positions before it.
        self.sliding_window = int(sliding_window) if sliding_window else 0
        self.logits_soft_cap = float(logits_soft_cap) if logits_soft_cap else 0.0
        self.sinks = sinks
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type

    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,  # [tokens, heads, head_size]
        key: torch.Tensor,  # [tokens, kv_heads, head_size]
        value: torch.Tensor,  # [tokens, kv_heads, head_size_v]
        kv_cache: torch.Tensor,  # [blocks, block_size, kv_heads, head_size + head_size_v]
        attn_metadata: TpuPagedAttentionMetadata | None,
        output: torch.Tensor,  # [tokens, heads, head_size_v]
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported on tpu")
        if attn_metadata is None:  # vLLM's profiling run, without a KV cache
            return output
        md = attn_metadata
        writes = self.kv_sharing_target_layer_name is None and key is not None
        sinks = self.sinks
        if sinks is not None and sinks.device != query.device:
            sinks = sinks.to(query.device)
        out, new_cache = torch.ops.torchtpu.ragged_paged_attention(
            query,
            key if writes else None,
            value if writes else None,
            kv_cache,
            md.slot_mapping,
            md.block_tables,
            md.seq_lens,
            md.query_start_loc,
            self.scale,
            self.logits_soft_cap,
            self.sliding_window,
            None if sinks is None else sinks.to(torch.float32),
        )
        if writes:
            kv_cache.copy_(new_cache)
        output.copy_(out)
        return output
