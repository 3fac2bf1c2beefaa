"""torchtpu::ragged_paged_attention (csrc/lowering/paged_attention.cpp): a mixed prefill/decode
batch's attention over a paged KV cache, with the step's K/V written into the cache, against a
float64 reference written token by token from the op's definition. Eager (one op) and compiled
(inside a torch.compile graph, the cache updated in place through the graph's donated input)."""

from __future__ import annotations

import pytest
import torch

import torchtpu  # noqa: F401

op = torch.ops.torchtpu.ragged_paged_attention


def reference(q, k, v, cache, slot_mapping, block_tables, seq_lens, query_start_loc, scale,
              soft_cap=0.0, window=0, sinks=None):
    """Float64 attention token by token: request r's tokens query_start_loc[r]..[r+1] sit at the
    end of its seq_lens[r] cached tokens; each sees positions <= its own (within the window)."""
    cache = cache.clone()
    nb, bs, hkv, w = cache.shape
    t_all, heads, dk = q.shape
    dv = w - dk
    group = heads // hkv
    flat = cache.view(nb * bs, hkv, w)
    if k is not None:
        for t, s in enumerate(slot_mapping.tolist()):
            if s >= 0:
                flat[s] = torch.cat([k[t], v[t]], dim=-1).to(cache.dtype)
    out = torch.zeros(t_all, heads, dv, dtype=torch.float64)
    starts = query_start_loc.tolist()
    for r in range(block_tables.shape[0]):
        length = int(seq_lens[r])
        slots = [int(block_tables[r, p // bs]) * bs + p % bs for p in range(length)]
        ctx = flat[slots].double()
        for t in range(starts[r], starts[r + 1]):
            pos = length - (starts[r + 1] - t)
            first = max(0, pos - window + 1) if window else 0
            for h in range(heads):
                kv = ctx[first:pos + 1, h // group]
                s = (kv[:, :dk] @ q[t, h].double()) * scale
                if soft_cap:
                    s = soft_cap * torch.tanh(s / soft_cap)
                if sinks is not None:
                    s = torch.cat([s, sinks[h].double().reshape(1)])
                p = torch.softmax(s, dim=0)[:kv.shape[0]]
                out[t, h] = p @ kv[:, dk:]
    return out, cache


def make_batch(seed, *, block_size=4, num_blocks=24, kv_heads=2, heads=4, dk=8, dv=8,
               layout=((0, 5), (7, 1), (3, 4), (11, 1)), pad_tokens=3, pad_reqs=1,
               max_blocks=6, dtype=torch.float32):
    """A batch whose requests are (cached tokens before this step, tokens this step): a fresh
    prefill, decodes and a chunked-prefill continuation; plus padding tokens (slot -1) and
    padding requests (no tokens, no context). Blocks are handed out shuffled."""
    g = torch.Generator().manual_seed(seed)
    reqs = len(layout) + pad_reqs
    tokens = sum(n for _, n in layout) + pad_tokens
    cache = torch.randn(num_blocks, block_size, kv_heads, dk + dv, generator=g).to(dtype)
    free = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()  # block 0: vLLM's null
    block_tables = torch.zeros(reqs, max_blocks, dtype=torch.int32)
    seq_lens = torch.zeros(reqs, dtype=torch.int32)
    slot_mapping = torch.full((tokens,), -1, dtype=torch.int64)
    starts = [0]
    for r, (before, n) in enumerate(layout):
        length = before + n
        need = -(-length // block_size)
        assert need <= max_blocks
        for j in range(need):
            block_tables[r, j] = free.pop()
        seq_lens[r] = length
        for i in range(n):
            p = before + i
            slot_mapping[starts[-1] + i] = int(block_tables[r, p // block_size]) * block_size + (
                p % block_size)
        starts.append(starts[-1] + n)
    while len(starts) < reqs + 1:
        starts.append(starts[-1])
    q = torch.randn(tokens, heads, dk, generator=g).to(dtype)
    k = torch.randn(tokens, kv_heads, dk, generator=g).to(dtype)
    v = torch.randn(tokens, kv_heads, dv, generator=g).to(dtype)
    query_start_loc = torch.tensor(starts, dtype=torch.int32)
    return q, k, v, cache, slot_mapping, block_tables, seq_lens, query_start_loc


def on_tpu(batch):
    return [t.to("tpu") for t in batch]


def real_rows(query_start_loc):
    return int(query_start_loc[-1])


@pytest.mark.parametrize("variant", [
    {},
    {"window": 3},
    {"soft_cap": 2.0},
    {"sinks": True},
    {"window": 5, "soft_cap": 1.5, "sinks": True},
])
def test_matches_reference(variant, no_cpu_fallback):
    batch = make_batch(0)
    q, k, v, cache, slots, tables, lens, starts = batch
    scale = 0.3
    sinks = torch.randn(q.shape[1], generator=torch.Generator().manual_seed(5)) \
        if variant.get("sinks") else None
    window = variant.get("window", 0)
    soft_cap = variant.get("soft_cap", 0.0)
    want, want_cache = reference(q, k, v, cache, slots, tables, lens, starts, scale, soft_cap,
                                 window, sinks)
    out, new_cache = op(*on_tpu(batch), scale, soft_cap, window,
                        None if sinks is None else sinks.to("tpu"))
    n = real_rows(starts)
    torch.testing.assert_close(out.cpu()[:n].double(), want[:n], atol=2e-5, rtol=2e-5)
    # Padding tokens attend to nothing (with sinks: only to the sink, which has no value).
    assert out.cpu()[n:].abs().max() == 0
    torch.testing.assert_close(new_cache.cpu(), want_cache, atol=0, rtol=0)


def test_gqa_wide_heads_and_different_value_size(no_cpu_fallback):
    batch = make_batch(1, kv_heads=1, heads=6, dk=12, dv=20, block_size=8, num_blocks=12,
                       layout=((0, 9), (30, 1), (8, 3)))
    q, k, v, cache, slots, tables, lens, starts = batch
    want, want_cache = reference(q, k, v, cache, slots, tables, lens, starts, 0.125)
    out, new_cache = op(*on_tpu(batch), 0.125)
    n = real_rows(starts)
    torch.testing.assert_close(out.cpu()[:n].double(), want[:n], atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(new_cache.cpu(), want_cache, atol=0, rtol=0)


def test_long_context_spans_several_loop_chunks(no_cpu_fallback):
    # 4-token blocks: 32 blocks (128 positions) per loop iteration; 300 cached tokens take 3.
    batch = make_batch(2, block_size=4, num_blocks=200, max_blocks=80, pad_tokens=0,
                       pad_reqs=0, layout=((300, 1), (0, 6), (150, 2)))
    want, want_cache = reference(*batch, 0.2, 0.0, 0, None)
    out, new_cache = op(*on_tpu(batch), 0.2)
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(new_cache.cpu(), want_cache, atol=0, rtol=0)


def test_bfloat16(no_cpu_fallback):
    batch = make_batch(3, dtype=torch.bfloat16)
    q, k, v, cache, slots, tables, lens, starts = batch
    want, want_cache = reference(q, k, v, cache, slots, tables, lens, starts, 0.35)
    out, new_cache = op(*on_tpu(batch), 0.35)
    assert out.dtype == torch.bfloat16 and new_cache.dtype == torch.bfloat16
    n = real_rows(starts)
    torch.testing.assert_close(out.cpu()[:n].double(), want[:n], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(new_cache.cpu(), want_cache, atol=0, rtol=0)


def test_without_key_and_value_reads_only(no_cpu_fallback):
    # A layer that shares another layer's cache passes no K/V: nothing is written.
    q, k, v, cache, slots, tables, lens, starts = make_batch(4)
    batch = (q, None, None, cache, slots, tables, lens, starts)
    want, _ = reference(*batch, 0.5)
    out, new_cache = op(q.to("tpu"), None, None, *on_tpu(batch[3:]), 0.5)
    n = real_rows(starts)
    torch.testing.assert_close(out.cpu()[:n].double(), want[:n], atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(new_cache.cpu(), cache, atol=0, rtol=0)


def test_compiled_writes_the_cache_in_place_and_reuses_its_program(no_cpu_fallback):
    """Inside torch.compile the op is a node of the graph's one program; the cache is a mutated
    graph input, so the update lands in the caller's tensor (same storage). New metadata values
    (lengths, slots, block ids) run the same program."""

    def step(q, k, v, cache, slots, tables, lens, starts):
        out, new_cache = op(q, k, v, cache, slots, tables, lens, starts, 0.3)
        cache.copy_(new_cache)
        return out * 2

    compiled = torch.compile(step, backend="tpu", dynamic=False)
    batch = make_batch(5)
    tpu = on_tpu(batch)
    cache = tpu[3]
    ptr = cache.untyped_storage().data_ptr()
    got = compiled(*tpu)
    want, want_cache = reference(*batch, 0.3)
    n = real_rows(batch[7])
    torch.testing.assert_close(got.cpu()[:n].double(), 2 * want[:n], atol=5e-5, rtol=5e-5)
    torch.testing.assert_close(cache.cpu(), want_cache, atol=0, rtol=0)
    assert cache.untyped_storage().data_ptr() == ptr
    before = torchtpu.metrics()["cache_misses"]
    for seed in (6, 7):
        # Same shapes, other values: another mix of lengths and blocks.
        other = make_batch(seed, layout=((2, 5), (9, 1), (0, 4), (4, 1)))
        other = list(other)
        other[3] = cache.cpu()
        got = compiled(*on_tpu(other[:3]), cache, *on_tpu(other[4:]))
        want, want_cache = reference(*other, 0.3)
        torch.testing.assert_close(got.cpu()[:n].double(), 2 * want[:n], atol=5e-5, rtol=5e-5)
        torch.testing.assert_close(cache.cpu(), want_cache, atol=0, rtol=0)
    assert torchtpu.metrics()["cache_misses"] == before


def test_bad_metadata_raises_clear_errors():
    q, k, v, cache, slots, tables, lens, starts = on_tpu(make_batch(8))
    with pytest.raises(ValueError, match="multiple of the cache's kv heads"):
        op(q[:, :3], k, v, cache, slots, tables, lens, starts, 0.3)
    with pytest.raises(ValueError, match="query_start_loc has"):
        op(q, k, v, cache, slots, tables, lens, starts[:-1], 0.3)
    with pytest.raises(ValueError, match="key and value must both"):
        op(q, k, None, cache, slots, tables, lens, starts, 0.3)
    with pytest.raises(ValueError, match="slot_mapping must be int32 or int64"):
        op(q, k, v, cache, slots.float(), tables, lens, starts, 0.3)
    with pytest.raises(ValueError, match="sliding_window must be >= 0"):
        op(q, k, v, cache, slots, tables, lens, starts, 0.3, 0.0, -2)


def test_out_of_range_slot_raises_at_sync():
    q, k, v, cache, slots, tables, lens, starts = on_tpu(make_batch(9))
    bad = slots.clone()
    bad[0] = cache.shape[0] * cache.shape[1]
    out, _ = op(q, k, v, cache, bad, tables, lens, starts, 0.3)
    with pytest.raises(RuntimeError, match="slot 96 is outside the KV cache"):
        out.cpu()
