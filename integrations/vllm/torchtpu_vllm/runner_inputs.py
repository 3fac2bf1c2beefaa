"""A step's inputs, prepared on the host in numpy into one int32 buffer of its bucket's layout and
uploaded once: token ids, positions, slot mapping, query start offsets, sequence lengths,
block tables, the rows whose logits are sampled, and every request's sampling parameters.

Nothing here runs on the device, and every size in the buffer is the bucket's, so the step's
program depends on the bucket alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from .sampling import PARAM_WORDS, SAMPLING_EPS, fallback_reason, pack_params


class StepLayout(NamedTuple):
    """Where each input lives in a step buffer of `tokens` tokens and `reqs` requests (each
    with `max_blocks` block-table entries). The sampling parameters come first, so the
    sampler's program depends on the request bucket only."""

    tokens: int
    reqs: int
    max_blocks: int

    @property
    def params(self) -> int:
        return 0

    @property
    def token_ids(self) -> int:
        return PARAM_WORDS * self.reqs

    @property
    def positions(self) -> int:
        return self.token_ids + self.tokens

    @property
    def slot_mapping(self) -> int:
        return self.positions + self.tokens

    @property
    def query_start_loc(self) -> int:
        return self.slot_mapping + self.tokens

    @property
    def seq_lens(self) -> int:
        return self.query_start_loc + self.reqs + 1

    @property
    def logits_indices(self) -> int:
        return self.seq_lens + self.reqs

    @property
    def block_tables(self) -> int:
        return self.logits_indices + self.reqs

    @property
    def size(self) -> int:
        return self.block_tables + self.reqs * self.max_blocks


class StepViews(NamedTuple):
    params: torch.Tensor
    token_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    logits_indices: torch.Tensor
    block_tables: torch.Tensor


def split(buf: torch.Tensor, lay: StepLayout) -> StepViews:
    """The inputs inside a step buffer (slices of it, inside the step's program)."""
    t, r = lay.tokens, lay.reqs

    def part(start: int, n: int) -> torch.Tensor:
        return buf[start:start + n]

    return StepViews(
        params=part(lay.params, PARAM_WORDS * r),
        token_ids=part(lay.token_ids, t),
        positions=part(lay.positions, t),
        slot_mapping=part(lay.slot_mapping, t),
        query_start_loc=part(lay.query_start_loc, r + 1),
        seq_lens=part(lay.seq_lens, r),
        logits_indices=part(lay.logits_indices, r),
        block_tables=part(lay.block_tables, r * lay.max_blocks).view(r, lay.max_blocks),
    )


def dummy_buffer(lay: StepLayout) -> np.ndarray:
    """A valid step of no requests (every token padding), to compile or warm a bucket with."""
    buf = np.zeros(lay.size, np.int32)
    pack_params(buf, lay.reqs, [])
    buf[lay.slot_mapping:lay.slot_mapping + lay.tokens] = -1
    return buf


@dataclass
class HostStep:
    layout: StepLayout
    buffer: np.ndarray
    num_reqs: int
    num_tokens: int
    all_greedy: bool
    # Why this step samples with vLLM's own Sampler (None: the tpu sampler does it).
    fallback: str | None


def prepare_step(runner, scheduler_output, layout_of) -> HostStep:
    """The step's buffer from the runner's persistent batch (vLLM's InputBatch, host arrays) and
    the scheduler's token counts. `layout_of(tokens, reqs)` picks the bucket. Also fills the
    host arrays vLLM's bookkeeping reads (query_start_loc, discard_request_mask)."""
    ib = runner.input_batch
    n = ib.num_reqs
    req_ids = ib.req_ids
    counts = scheduler_output.num_scheduled_tokens
    sched = np.fromiter((counts[r] for r in req_ids), dtype=np.int64, count=n)
    total = int(sched.sum())
    lay = layout_of(total, n)
    buf = np.zeros(lay.size, np.int32)

    ends = np.cumsum(sched)
    starts = ends - sched
    req_of = np.repeat(np.arange(n), sched)
    computed = ib.num_computed_tokens_cpu[:n].astype(np.int64)
    positions = computed[req_of] + (np.arange(total) - starts[req_of])
    table = ib.block_table[0]
    blocks = table.get_numpy_array()
    bs = table.block_size

    buf[lay.token_ids:lay.token_ids + total] = ib.token_ids_cpu[req_of, positions]
    buf[lay.positions:lay.positions + total] = positions
    slots = buf[lay.slot_mapping:lay.slot_mapping + lay.tokens]
    slots[:total] = blocks[req_of, positions // bs].astype(np.int64) * bs + positions % bs
    slots[total:] = -1
    qsl = buf[lay.query_start_loc:lay.query_start_loc + lay.reqs + 1]
    qsl[1:n + 1] = ends
    qsl[n + 1:] = total
    seq_lens = computed + sched
    buf[lay.seq_lens:lay.seq_lens + n] = seq_lens
    buf[lay.logits_indices:lay.logits_indices + n] = ends - 1
    width = lay.max_blocks
    tables = buf[lay.block_tables:lay.block_tables + lay.reqs * width].reshape(lay.reqs, width)
    tables[:n] = blocks[:n, :width]

    rows = []
    fallback = runner.tpu_fallback_reason
    all_greedy = True
    vocab = ib.vocab_size
    for i, rid in enumerate(req_ids):
        state = runner.requests[rid]
        sp = state.sampling_params
        if fallback is None:
            fallback = fallback_reason(sp, len(state.output_token_ids))
        temp = float(ib.temperature_cpu[i])
        if temp >= SAMPLING_EPS:
            all_greedy = False
        top_k = int(ib.top_k_cpu[i]) if sp is not None else vocab
        rows.append((temp, float(sp.top_p) if sp else 1.0, float(sp.min_p) if sp else 0.0,
                     top_k if 0 < top_k < vocab else vocab,
                     runner.tpu_seeds.of(rid, sp.seed if sp else None), int(seq_lens[i])))
    pack_params(buf, lay.reqs, rows)

    # What vLLM's bookkeeping (prompt logprobs, discarding partial prefills) reads.
    runner.query_start_loc.np[0] = 0
    runner.query_start_loc.np[1:n + 1] = ends
    num_tokens = np.fromiter((runner.requests[r].num_tokens for r in req_ids), np.int64, n)
    runner.discard_request_mask.np[:n] = seq_lens < num_tokens
    return HostStep(lay, buf, n, total, all_greedy, fallback)
