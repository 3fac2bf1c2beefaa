"""The tpu sampler (torchtpu_vllm/sampling.py) on its own: each request's temperature, top-k,
top-p, min-p and seed are runtime values in one parameter buffer, eagerly and as one compiled
program, against the definitions (a float64 CPU reference of which tokens may be drawn, and the
softmax the draws must follow)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchtpu  # noqa: F401
from torchtpu_vllm.programs import trace_program
from torchtpu_vllm.sampling import PARAM_WORDS, pack_params, sample, uniform_noise

VOCAB = 40


def params_tensor(rows, reqs=None):
    reqs = reqs or len(rows)
    buf = np.zeros(PARAM_WORDS * reqs, np.int32)
    pack_params(buf, reqs, rows)
    return torch.from_numpy(buf)


def allowed_tokens(logits, temperature, top_k, top_p, min_p):
    """The tokens vLLM may draw (float64): min-p on the tempered softmax, then top-k and top-p
    on what min-p kept."""
    p = torch.softmax(logits.double() / temperature, dim=-1)
    p = torch.where(p >= min_p * p.max(), p, 0.0)
    p = p / p.sum()
    order = p.argsort(descending=True)
    allowed = set()
    mass = 0.0
    for rank, tok in enumerate(order.tolist()):
        if rank >= top_k or mass >= top_p or p[tok] == 0:
            break
        allowed.add(tok)
        mass += float(p[tok])
    return allowed


@pytest.fixture(scope="module")
def compiled_sampler():
    logits = torch.zeros(8, VOCAB, device="tpu")
    params = torch.zeros(PARAM_WORDS * 8, dtype=torch.int32, device="tpu")
    compiled, _ = trace_program("sampler", lambda lg, p: [sample(lg, p)], [logits, params])
    return lambda lg, p: compiled([lg, p])[0]


def test_greedy_rows_take_the_argmax_whatever_the_other_parameters(compiled_sampler):
    logits = torch.randn(8, VOCAB, generator=torch.Generator().manual_seed(0))
    rows = [(0.0, 0.5, 0.2, 3, 11 + i, 100 + i) for i in range(8)]
    out = compiled_sampler(logits.to("tpu"), params_tensor(rows).to("tpu")).cpu()
    assert out.dtype == torch.int32
    assert torch.equal(out.long(), logits.argmax(-1))


@pytest.mark.parametrize("temperature,top_k,top_p,min_p", [
    (1.0, VOCAB, 1.0, 0.0),
    (0.7, 5, 1.0, 0.0),
    (1.3, VOCAB, 0.6, 0.0),
    (1.0, VOCAB, 1.0, 0.3),
    (0.9, 4, 0.8, 0.1),
    (1.0, 1, 1.0, 0.0),
])
def test_draws_only_allowed_tokens_eager_and_compiled_alike(compiled_sampler, temperature, top_k,
                                                            top_p, min_p):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(8, VOCAB, generator=g) * 2
    for seed_base in range(4):
        rows = [(temperature, top_p, min_p, top_k, 1000 * seed_base + i, 7 + i) for i in range(8)]
        params = params_tensor(rows)
        eager = sample(logits.to("tpu"), params.to("tpu")).cpu()
        compiled = compiled_sampler(logits.to("tpu"), params.to("tpu")).cpu()
        assert torch.equal(eager, compiled)
        for i in range(8):
            allowed = allowed_tokens(logits[i], temperature, top_k, top_p, min_p)
            assert int(compiled[i]) in allowed, (i, int(compiled[i]), allowed)


def test_draws_follow_the_softmax(compiled_sampler):
    """1024 draws (one per seed) from fixed logits: every token's frequency within 5 standard
    deviations of its softmax probability."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0] + [-30.0] * (VOCAB - 5))
    probs = torch.softmax(logits.double(), -1)
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    batch = logits.expand(8, VOCAB).contiguous().to("tpu")
    for base in range(128):
        rows = [(1.0, 1.0, 0.0, VOCAB, 8 * base + i, 42) for i in range(8)]
        out = compiled_sampler(batch, params_tensor(rows).to("tpu")).cpu()
        counts += torch.bincount(out.long(), minlength=VOCAB).double()
    n = counts.sum()
    sd = (n * probs * (1 - probs)).sqrt()
    assert ((counts - n * probs).abs() <= 5 * sd + 1).all(), (counts[:6], (n * probs)[:6])


def test_a_seed_draws_the_same_tokens_in_any_batch(compiled_sampler):
    logits = torch.randn(8, VOCAB, generator=torch.Generator().manual_seed(2))
    rows = [(1.0, 1.0, 0.0, VOCAB, 500 + i, 9) for i in range(8)]
    first = compiled_sampler(logits.to("tpu"), params_tensor(rows).to("tpu")).cpu()
    perm = [3, 1, 7, 0, 6, 2, 5, 4]
    shuffled = compiled_sampler(logits[perm].to("tpu"),
                                params_tensor([rows[i] for i in perm]).to("tpu")).cpu()
    assert torch.equal(shuffled, first[perm])
    # Another position (the next token) draws other noise.
    moved = [(t, p, m, k, s, pos + 1) for t, p, m, k, s, pos in rows]
    assert not torch.equal(uniform_noise(torch.tensor([500]), torch.tensor([9]), VOCAB),
                           uniform_noise(torch.tensor([500]), torch.tensor([10]), VOCAB))
    assert compiled_sampler(logits.to("tpu"), params_tensor(moved).to("tpu")).shape == (8,)


def test_noise_is_uniform_and_the_same_on_tpu_and_cpu():
    seeds = torch.arange(64, dtype=torch.int32)
    positions = torch.full((64,), 5, dtype=torch.int32)
    cpu = uniform_noise(seeds, positions, 256)
    tpu = uniform_noise(seeds.to("tpu"), positions.to("tpu"), 256).cpu()
    assert torch.equal(cpu, tpu)
    assert 0 < float(cpu.min()) and float(cpu.max()) < 1
    assert abs(float(cpu.mean()) - 0.5) < 0.01
