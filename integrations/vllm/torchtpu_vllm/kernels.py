"""Torch-op versions of the Triton kernels vLLM's GPU runner launches, for the tpu device.

They are registered through vLLM's own override registry (vllm.triton_utils.dispatcher), with
the parameter names of the Triton kernels so vLLM's launcher forwards its arguments by name.
"""

from __future__ import annotations

import torch


def compute_slot_mapping(
    num_tokens: int,
    max_num_tokens: int,
    query_start_loc_ptr: torch.Tensor,  # [num_reqs + 1] int32
    positions_ptr: torch.Tensor,  # [num_tokens] int64
    block_table_ptr: torch.Tensor,  # [max_num_reqs, max_blocks_per_req] int32
    block_table_stride: int,
    slot_mapping_ptr: torch.Tensor,  # [max_num_tokens] int64
    KV_CACHE_BLOCK_SIZE: int,  # noqa: N803  (the Triton kernel's names)
    TOTAL_CP_WORLD_SIZE: int = 1,  # noqa: N803
    TOTAL_CP_RANK: int = 0,  # noqa: N803
    CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,  # noqa: N803
    PAD_ID: int = -1,  # noqa: N803
    BLOCK_SIZE: int = 1024,  # noqa: N803
) -> None:
    """slot_mapping[t] = block_table[req(t), pos(t) // block] * block + pos(t) % block for the
    first num_tokens tokens, PAD_ID for the rest (what the Triton kernel computes)."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("context parallelism is not supported on tpu")
    num_tokens = int(num_tokens)
    if num_tokens > 0:
        device = positions_ptr.device
        positions = positions_ptr[:num_tokens].to(torch.int64)
        token = torch.arange(num_tokens, device=device, dtype=torch.int64)
        # The request of each token: how many request ends lie at or before it. A comparison
        # matrix (tokens x requests) rather than searchsorted keeps it to plain lowered ops.
        ends = query_start_loc_ptr[1:].to(torch.int64)
        req = (token[:, None] >= ends[None, :]).to(torch.int64).sum(dim=1)
        block_index = torch.div(positions, KV_CACHE_BLOCK_SIZE, rounding_mode="floor")
        offset = positions - block_index * KV_CACHE_BLOCK_SIZE
        blocks = block_table_ptr[req, block_index].to(torch.int64)
        slot_mapping_ptr[:num_tokens].copy_(blocks * KV_CACHE_BLOCK_SIZE + offset)
    if max_num_tokens > num_tokens:
        slot_mapping_ptr[num_tokens:max_num_tokens].fill_(PAD_ID)
