"""Random sampling on tpu.

The tpu generator (ThreeFry on (seed, offset)) is not CPU's Mersenne Twister, so values are
not compared with CPU: the tests check ranges, dtypes, moments on 10^4+ samples, and
reproducibility under torch.manual_seed.
"""

import math

import pytest
import torch
import torchtpu  # noqa: F401  (registers the tpu device)
from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks
from conftest import assert_same_error

DEV = "tpu"
N = 20000

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]

OWN_OPS = {"uniform", "normal", "normal_functional", "bernoulli", "random", "exponential",
           "log_normal", "cauchy", "geometric"}


pytestmark = pytest.mark.usefixtures("no_own_fallback")  # conftest.py


def stats(t):
    t = t.cpu().double()
    return t.mean().item(), t.std().item()


# ---- uniform ----


@pytest.mark.parametrize("dtype", FLOATS)
def test_rand(dtype):
    x = torch.rand(N, dtype=dtype, device=DEV)
    assert x.device.type == DEV and x.dtype == dtype and x.shape == (N,)
    c = x.cpu()
    assert c.min().item() >= 0 and c.max().item() < 1
    mean, std = stats(c)
    assert abs(mean - 0.5) < 0.02
    assert abs(std - 1 / math.sqrt(12)) < 0.02
    # Not a handful of repeated values.
    assert c.unique().numel() > (100 if dtype in (torch.bfloat16,) else 1000)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_uniform_range(dtype):
    x = torch.empty(N, 2, dtype=dtype, device=DEV).uniform_(-3, 5)
    c = x.cpu().float()
    assert c.min().item() >= -3 and c.max().item() < 5
    mean, std = stats(c)
    assert abs(mean - 1) < 0.1
    assert abs(std - 8 / math.sqrt(12)) < 0.1
    # Both columns are independent streams, not copies.
    assert not torch.equal(c[:, 0], c[:, 1])


def test_rand_shapes():
    assert torch.rand((), device=DEV).shape == ()
    assert torch.rand(0, 3, device=DEV).shape == (0, 3)
    x = torch.rand(3, 4, 5, device=DEV).cpu()
    assert ((x >= 0) & (x < 1)).all()


# ---- normal ----


@pytest.mark.parametrize("dtype", FLOATS)
def test_randn(dtype):
    x = torch.randn(N, dtype=dtype, device=DEV)
    assert x.dtype == dtype
    mean, std = stats(x)
    assert abs(mean) < 0.05
    assert abs(std - 1) < 0.05
    c = x.cpu().double()
    # Tails exist but are sane: ~4.6% of samples beyond 2 sigma.
    frac = (c.abs() > 2).double().mean().item()
    assert 0.03 < frac < 0.065
    assert torch.isfinite(c).all()


def test_normal_variants():
    x = torch.empty(N, device=DEV).normal_(3.0, 2.0)
    mean, std = stats(x)
    assert abs(mean - 3) < 0.1 and abs(std - 2) < 0.1
    m = torch.full((N,), -5.0, device=DEV)
    mean, std = stats(torch.normal(m, 0.5))
    assert abs(mean + 5) < 0.05 and abs(std - 0.5) < 0.05
    s = torch.full((N,), 3.0, device=DEV)
    mean, std = stats(torch.normal(1.0, s))
    assert abs(mean - 1) < 0.15 and abs(std - 3) < 0.15
    mean, std = stats(torch.normal(m, s))
    assert abs(mean + 5) < 0.15 and abs(std - 3) < 0.15
    # Broadcast: per-row means.
    mm = torch.tensor([[0.0], [100.0]], device=DEV).expand(2, N // 2)
    r = torch.normal(mm, torch.ones(2, N // 2, device=DEV)).cpu()
    assert abs(r[0].mean().item()) < 0.1 and abs(r[1].mean().item() - 100) < 0.1


def test_log_normal_cauchy_geometric_exponential():
    x = torch.empty(N, device=DEV).exponential_(2.0).cpu()
    assert (x >= 0).all() and abs(x.mean().item() - 0.5) < 0.03
    x = torch.empty(N, device=DEV).log_normal_(0.0, 0.5).cpu()
    assert (x > 0).all() and abs(x.log().mean().item()) < 0.03
    x = torch.empty(N, device=DEV).cauchy_(1.0, 2.0).cpu()
    assert abs(x.median().item() - 1) < 0.15
    x = torch.empty(N, device=DEV).geometric_(0.25).cpu()
    assert (x >= 1).all() and (x == x.round()).all()
    assert abs(x.mean().item() - 4) < 0.2


# ---- bernoulli ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_bernoulli_scalar_p(dtype):
    x = torch.empty(N, dtype=dtype, device=DEV).bernoulli_(0.3).cpu()
    assert x.dtype == dtype
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(x.double().mean().item() - 0.3) < 0.02
    assert (torch.empty(100, device=DEV).bernoulli_(0.0).cpu() == 0).all()
    assert (torch.empty(100, device=DEV).bernoulli_(1.0).cpu() == 1).all()


def test_bernoulli_tensor_p():
    p = torch.cat([torch.full((N // 2,), 0.1), torch.full((N // 2,), 0.9)]).to(DEV)
    x = torch.bernoulli(p).cpu()
    assert abs(x[: N // 2].mean().item() - 0.1) < 0.02
    assert abs(x[N // 2:].mean().item() - 0.9) < 0.02
    y = torch.zeros(N, device=DEV).bernoulli_(p).cpu()
    assert abs(y[N // 2:].mean().item() - 0.9) < 0.02
    b = torch.zeros(N, dtype=torch.bool, device=DEV).bernoulli_(0.5).cpu()
    assert b.dtype == torch.bool and 0.45 < b.float().mean().item() < 0.55


# ---- integers ----


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32])
def test_randint(dtype):
    x = torch.randint(-3 if dtype != torch.uint8 else 0, 7, (N,), dtype=dtype, device=DEV).cpu()
    assert x.dtype == dtype
    lo = -3 if dtype != torch.uint8 else 0
    assert set(x.unique().tolist()) == set(range(lo, 7))
    counts = torch.bincount((x - lo).long())
    assert counts.min().item() > N / (7 - lo) * 0.85


def test_random_inplace_forms():
    x = torch.empty(N, dtype=torch.int64, device=DEV).random_(5).cpu()
    assert x.min().item() == 0 and x.max().item() == 4
    x = torch.empty(N, dtype=torch.int64, device=DEV).random_(10, 12).cpu()
    assert set(x.unique().tolist()) == {10, 11}
    big = torch.empty(N, dtype=torch.int64, device=DEV).random_(0, 1 << 40).cpu()
    assert big.max().item() > 1 << 38 and big.min().item() >= 0
    # No bounds: [0, max] for ints, [0, 2^digits] for floats.
    full = torch.empty(N, dtype=torch.int32, device=DEV).random_().cpu()
    assert full.min().item() >= 0 and full.max().item() > (1 << 30)
    f = torch.empty(N, dtype=torch.float32, device=DEV).random_().cpu()
    assert f.min().item() >= 0 and f.max().item() <= 2 ** 24 and (f == f.round()).all()
    b = torch.empty(N, dtype=torch.bool, device=DEV).random_().cpu()
    assert set(b.unique().tolist()) == {False, True}
    neg = torch.empty(N, dtype=torch.int64, device=DEV).random_(-(1 << 62), None).cpu()
    assert neg.min().item() < 0 < neg.max().item()


# ---- reproducibility ----


def test_manual_seed_reproduces():
    torch.manual_seed(0)
    a = torch.randn(1000, device=DEV).cpu()
    b = torch.rand(10, device=DEV).cpu()
    torch.manual_seed(0)
    a2 = torch.randn(1000, device=DEV).cpu()
    b2 = torch.rand(10, device=DEV).cpu()
    assert torch.equal(a, a2) and torch.equal(b, b2)
    torch.manual_seed(1)
    assert not torch.equal(torch.randn(1000, device=DEV).cpu(), a)


def test_consecutive_draws_are_independent():
    torch.manual_seed(123)
    a = torch.randn(N, device=DEV).cpu()
    b = torch.randn(N, device=DEV).cpu()
    assert not torch.equal(a, b)
    # Neither equal nor shifted copies of each other (counter overlap would give that).
    for shift in range(3):
        corr = torch.corrcoef(torch.stack([a[shift:], b[: N - shift]]))[0, 1].item()
        assert abs(corr) < 0.05, (shift, corr)
    # Small draws (offsets one apart) differ too.
    c = [torch.rand(1, device=DEV).item() for _ in range(50)]
    assert len(set(c)) == 50


def test_explicit_generator():
    g = torch.Generator(device=DEV)
    assert g.device.type == "tpu"
    g.manual_seed(42)
    a = torch.randn(100, device=DEV, generator=g).cpu()
    g.manual_seed(42)
    b = torch.randn(100, device=DEV, generator=g).cpu()
    assert torch.equal(a, b)
    state = g.get_state()
    c = torch.rand(100, device=DEV, generator=g).cpu()
    g.set_state(state)
    d = torch.rand(100, device=DEV, generator=g).cpu()
    assert torch.equal(c, d)


def test_fork_rng_restores():
    torch.manual_seed(7)
    with torch.random.fork_rng(devices=[0], device_type=DEV):
        torch.randn(10, device=DEV)
    x = torch.randn(10, device=DEV).cpu()
    torch.manual_seed(7)
    y = torch.randn(10, device=DEV).cpu()
    assert torch.equal(x, y)


# ---- multinomial ----

def _on_tpu(x):
    return x.to("tpu")


def test_multinomial_distribution_and_generator():
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 0.0, 2.0]])
    torch.manual_seed(0)
    s = torch.multinomial(_on_tpu(p), 20000, replacement=True)
    assert s.device.type == "tpu" and s.dtype == torch.int64 and s.shape == (2, 20000)
    s = s.cpu()
    for i in range(2):
        freq = torch.bincount(s[i], minlength=4).float() / 20000
        torch.testing.assert_close(freq, p[i] / p[i].sum(), atol=0.02, rtol=0)
    # without replacement: distinct categories, zero-probability ones only once the rest are used
    for _ in range(5):
        t = torch.multinomial(_on_tpu(p), 3).cpu()
        for i in range(2):
            assert len(set(t[i].tolist())) == 3
        assert 2 not in t[1].tolist() and 1 not in t[0].tolist()
    first = torch.zeros(4)
    for _ in range(200):
        first[torch.multinomial(_on_tpu(p[0]), 2)[0].item()] += 1
    torch.testing.assert_close(first / 200, p[0], atol=0.1, rtol=0)
    a = torch.multinomial(_on_tpu(p), 2, generator=torch.Generator("tpu").manual_seed(3))
    b = torch.multinomial(_on_tpu(p), 2, generator=torch.Generator("tpu").manual_seed(3))
    assert torch.equal(a.cpu(), b.cpu())
    assert torch.multinomial(_on_tpu(p[1]).bfloat16(), 4).shape == (4,)


# ---- multinomial's checks ----

BAD_PROBS = {
    "negative": [0.2, -0.1, 0.5],
    "inf": [0.2, float("inf"), 0.5],
    "nan": [0.2, float("nan"), 0.5],
    "zero_row": [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]],
    "inf_before_negative": [float("inf"), -1.0, 1.0],
    "zero_row_before_negative": [[0.0, 0.0], [1.0, -1.0]],
}


@pytest.mark.parametrize("replacement,k", [(False, 1), (False, 2), (True, 1), (True, 2)])
@pytest.mark.parametrize("case", sorted(BAD_PROBS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_multinomial_value_errors(case, replacement, k, dtype):
    p = torch.tensor(BAD_PROBS[case], dtype=dtype)
    assert_same_error(torch.multinomial, p, k, replacement)


@pytest.mark.parametrize("p,k,replacement", [
    (torch.tensor([0.2, 0.3, 0.5]), 4, False),  # more samples than categories
    (torch.tensor(1.0), 1, False),              # 0-d
    (torch.ones(2, 2, 2), 1, False),            # 3-d
    (torch.tensor([0.2, 0.8]), 0, True),        # no samples
    (torch.tensor([1, 2]), 1, False),           # integer probabilities
])
def test_multinomial_shape_errors(p, k, replacement):
    assert_same_error(torch.multinomial, p, k, replacement)


@pytest.mark.parametrize("replacement,k", [(False, 1), (False, 3), (True, 1), (True, 6)])
def test_multinomial_valid_input(replacement, k):
    p = torch.tensor([[0.0, 1.0, 2.0, 0.0, 3.0], [5.0, 0.0, 0.0, 1e-3, 1.0]])
    before = fallback_counts()
    got = torch.multinomial(p.to("tpu"), k, replacement)
    want = torch.multinomial(p, k, replacement)
    assert got.dtype == want.dtype and got.shape == want.shape
    got = got.cpu()
    assert bool((p.gather(1, got) > 0).all()), got  # never a zero-probability category
    if not replacement:
        assert all(len(set(r.tolist())) == k for r in got)
    # An empty batch is no error, as on the CPU (no values to check).
    assert torch.multinomial(torch.empty(0, 3, device="tpu"), 2).shape == (0, 2)
    assert not new_fallbacks(before)


# ---- randperm runs natively in eager mode (it took the CPU fallback) ----

@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8,
                                   torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 250])
def test_randperm_is_a_permutation(n, dtype):
    # (bfloat16 holds every integer up to 256 exactly; the CPU does not check larger n for it.)
    p = torch.randperm(n, dtype=dtype, device="tpu")
    assert p.dtype == dtype and p.shape == (n,) and p.device.type == "tpu"
    assert torch.equal(p.cpu().double().sort().values, torch.arange(n, dtype=torch.float64))
    out = torch.empty(3, dtype=dtype, device="tpu")
    assert torch.randperm(n, out=out) is out and out.shape == (n,)


@pytest.mark.usefixtures("no_cpu_fallback")
def test_randperm_is_uniform():
    # 5 values: every (position, value) cell has probability 1/5. 3000 draws put 600 +- 22
    # (one sd) in each cell; 6 sd is a p-value under 1e-8 per cell.
    g = torch.Generator(device="tpu").manual_seed(0)
    draws = torch.stack([torch.randperm(5, device="tpu", generator=g) for _ in range(3000)]).cpu()
    counts = torch.stack([(draws == v).sum(0) for v in range(5)])
    assert (counts - 600).abs().max() < 6 * 22, counts


@pytest.mark.parametrize("n, dtype", [(3000, torch.float16), (2**24 + 2, torch.float32),
                                      (200, torch.int8), (300, torch.uint8), (3, torch.bool)])
def test_randperm_bad_sizes_raise_like_cpu(n, dtype):
    import re

    with pytest.raises(RuntimeError) as cpu_err:
        torch.randperm(n, dtype=dtype)
    with pytest.raises(RuntimeError, match=re.escape(str(cpu_err.value).splitlines()[0])):
        torch.randperm(n, dtype=dtype, device="tpu")
    assert torch.randperm(5, device="tpu").cpu().sort().values.tolist() == list(range(5))


# ---- _standard_gamma runs natively (it took the CPU fallback): torch.distributions.Gamma,
# Beta and Dirichlet sample through it on tpu ----

def _ks(a, b):
    """Two-sample Kolmogorov-Smirnov distance."""
    a, b = a.double().sort().values, b.double().sort().values
    grid = torch.cat([a, b]).sort().values
    fa = torch.searchsorted(a, grid, right=True).double() / a.numel()
    fb = torch.searchsorted(b, grid, right=True).double() / b.numel()
    return (fa - fb).abs().max().item()


def _sample_like_cpu(op, *args):
    """op(*args) on tpu and on the CPU, each from a generator seeded 0; the tpu sample is checked
    to have the CPU's dtype and to come again from the same seed. 20000 draws a side keep the KS
    distance of two samples of one distribution under 1.95 * sqrt(2 / n) = 0.0195 with
    probability 0.999 (callers assert that)."""
    g = torch.Generator(device="tpu").manual_seed(0)
    on_tpu = [a.to("tpu") for a in args]
    got = op(*on_tpu, generator=g).cpu()
    want = op(*args, generator=torch.Generator().manual_seed(0))
    assert got.dtype == want.dtype and got.shape == want.shape
    g.manual_seed(0)
    assert torch.equal(op(*on_tpu, generator=g).cpu(), got)
    return got, want


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("alpha", [0.05, 0.5, 1.0, 2.5, 10.0, 300.0])
def test_standard_gamma_matches_cpu_distribution(alpha, dtype):
    got, want = _sample_like_cpu(torch._standard_gamma, torch.full((20000,), alpha, dtype=dtype))
    assert not got.isnan().any()
    assert _ks(got, want) < 0.0195, _ks(got, want)
    assert got.min() >= torch.finfo(dtype).tiny  # the CPU's floor


@pytest.mark.usefixtures("no_cpu_fallback")
def test_standard_gamma_zero_alpha_and_mixed_shapes():
    a = torch.tensor([[0.0, 0.3], [4.0, 0.0]])
    got = torch._standard_gamma(a.to("tpu")).cpu()
    assert got.shape == (2, 2)
    assert got[0, 0] == torch.finfo(torch.float32).tiny == got[1, 1]  # 0 floored, as on the CPU
    assert (got[0, 1] > 0) and (got[1, 0] > 0)
    assert torch._standard_gamma(torch.empty(0, 3, device="tpu")).shape == (0, 3)
    torch.tpu.manual_seed(0)
    d = torch.distributions.Gamma(torch.full((4000,), 3.0, device="tpu"), 2.0).sample().cpu()
    assert abs(d.mean().item() - 1.5) < 0.05 and abs(d.var().item() - 0.75) < 0.08


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sample_dirichlet_matches_cpu_distribution(dtype):
    # Each coordinate's marginal (a Beta) against the CPU's (KS as above); rows sum to 1 and
    # stay inside [smallest normal, largest value below 1], as on the CPU.
    n = 20000
    alpha = torch.tensor([0.3, 1.0, 4.0], dtype=dtype).expand(n, 3).contiguous()
    got, want = _sample_like_cpu(torch._sample_dirichlet, alpha)
    for k in range(3):
        assert _ks(got[:, k], want[:, k]) < 0.0195, (k, _ks(got[:, k], want[:, k]))
    torch.testing.assert_close(got.double().sum(-1), torch.ones(n, dtype=torch.float64))
    assert got.min() >= torch.finfo(dtype).tiny and got.max() < 1
    batched = torch._sample_dirichlet(torch.full((2, 4, 5), 2.0, device="tpu")).cpu()
    torch.testing.assert_close(batched.sum(-1), torch.ones(2, 4))
    torch.tpu.manual_seed(0)
    b = torch.distributions.Beta(torch.full((4000,), 2.0, device="tpu"),
                                 torch.full((4000,), 6.0, device="tpu")).sample().cpu()
    assert abs(b.mean().item() - 0.25) < 0.01


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rate", [0.0, 0.3, 3.0, 9.9, 10.0, 50.0, 1000.0])
def test_poisson_matches_cpu_distribution(rate, dtype):
    # Knuth's method below 10, PTRS from 10 on, as on the CPU.
    got, want = _sample_like_cpu(torch.poisson, torch.full((20000,), rate, dtype=dtype))
    assert torch.equal(got, got.round()) and (got >= 0).all()
    assert _ks(got, want) < 0.0195, _ks(got, want)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_poisson_bad_rate_raises_like_cpu(bad):
    with pytest.raises(RuntimeError, match="invalid Poisson rate"):
        torch.poisson(torch.tensor([1.0, bad]))
    with pytest.raises(RuntimeError, match="invalid Poisson rate"):
        torch.poisson(torch.tensor([1.0, bad], device="tpu")).cpu()
    assert torch.poisson(torch.zeros(3, device="tpu")).cpu().tolist() == [0.0, 0.0, 0.0]


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("count, prob", [(10, 0.5), (5, 0.1), (100, 0.05), (100, 0.3),
                                         (100, 0.9), (1000, 0.5), (20, 0.99), (1e6, 1e-6)])
def test_binomial_matches_cpu_distribution(count, prob, dtype):
    # Inversion below count * q = 10, BTRS above, flipped for prob > 0.5, as on the CPU.
    c, p = torch.full((20000,), float(count), dtype=dtype), torch.full((20000,), prob, dtype=dtype)
    got, want = _sample_like_cpu(torch.binomial, c, p)
    assert torch.equal(got, got.round()) and (got >= 0).all() and (got <= count).all()
    assert _ks(got, want) < 0.0195, _ks(got, want)


@pytest.mark.usefixtures("no_cpu_fallback")
def test_binomial_special_cases_match_cpu():
    # count <= 0 or prob <= 0 -> 0, prob >= 1 -> count, a NaN prob -> NaN (after those), exact.
    count = torch.tensor([0.0, -1.0, 7.0, 5.0, 0.0, 3.0, 9.0])
    prob = torch.tensor([0.5, 0.5, 0.0, 1.5, float("nan"), float("nan"), 1.0])
    got = torch.binomial(count.to("tpu"), prob.to("tpu")).cpu()
    torch.testing.assert_close(got, torch.binomial(count, prob), equal_nan=True)


# ---- Values are runtime arguments (DESIGN: structure at compile time, values at run time): new
# rates, counts, alphas, seeds and generator states of the same shapes never recompile ----

def _cpu_full(shape, values, dtype=torch.float32):
    return [torch.full(shape, v, dtype=dtype) for v in values]


# name -> (tpu inputs of calls 1, 2, 3 (made on the CPU, so no factory compiles between calls),
# the sampler). Values cross each sampler's algorithm switches: Knuth/PTRS at rate 10,
# inversion/BTRS at count * q = 10, the gamma boost below alpha 1.
SAMPLERS = {
    "randperm": ([()] * 3, lambda g: torch.randperm(50, device="tpu", generator=g)),
    "poisson": ([(r,) for r in _cpu_full((64,), [0.5, 12.0, 300.0])],
                lambda g, r: torch.poisson(r, generator=g)),
    "binomial": (list(zip(_cpu_full((64,), [5.0, 100.0, 1e4]),
                          _cpu_full((64,), [0.1, 0.3, 0.95]))),
                 lambda g, c, p: torch.binomial(c, p, generator=g)),
    "standard_gamma": ([(a,) for a in _cpu_full((64,), [0.3, 2.5, 50.0])],
                       lambda g, a: torch._standard_gamma(a, generator=g)),
    "standard_gamma_f64": ([(a,) for a in _cpu_full((64,), [0.3, 2.5, 50.0], torch.float64)],
                           lambda g, a: torch._standard_gamma(a, generator=g)),
    "sample_dirichlet": ([(a,) for a in _cpu_full((8, 4), [0.3, 2.5, 50.0])],
                         lambda g, a: torch._sample_dirichlet(a, generator=g)),
}


def _compile_counters():
    m = torchtpu.metrics()
    return m["programs_compiled"], m["cache_misses"]


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_new_values_and_seeds_never_recompile(name):
    inputs, sample = SAMPLERS[name]
    inputs = [[t.to("tpu") for t in args] for args in inputs]
    g = torch.Generator(device="tpu").manual_seed(0)
    first = sample(g, *inputs[0]).cpu()  # may compile (or load) its program
    after_first = _compile_counters()
    # New values, a reseeded generator, an advanced one, and the default generator.
    again = sample(g.manual_seed(1), *inputs[1]).cpu()
    sample(g, *inputs[2]).cpu()
    torch.tpu.manual_seed(5)
    sample(None, *inputs[1]).cpu()
    assert _compile_counters() == after_first
    if name == "randperm":  # same n, new seed: a new permutation from the same program
        assert not torch.equal(first, again)


@pytest.mark.usefixtures("no_cpu_fallback")
def test_compiled_samplers_never_recompile_for_new_values(fresh_dynamo):
    fn = torch.compile(lambda r, p, a: (torch.poisson(r) + torch.binomial(r, p),
                                        torch._standard_gamma(a), torch._sample_dirichlet(a)),
                       backend="tpu")
    calls = [(r.to("tpu"), p.to("tpu"), a.to("tpu")) for r, p, a in zip(
        _cpu_full((64,), [1.0, 12.0, 300.0]), _cpu_full((64,), [0.1, 0.5, 0.9]),
        _cpu_full((64,), [0.3, 2.5, 50.0]))]
    got = [tuple(t.cpu() for t in fn(*calls[0]))]
    after_first = _compile_counters()
    for i, args in enumerate(calls[1:]):
        torch.tpu.manual_seed(i)
        got.append(tuple(t.cpu() for t in fn(*args)))
    assert _compile_counters() == after_first
    # The new values reached the samplers: the means follow the rates and alphas.
    assert got[0][0].mean() < got[1][0].mean() < got[2][0].mean()
    assert got[0][1].mean() < got[1][1].mean() < got[2][1].mean()
