"""Numbers are run time: the Python numbers a workload varies from call to call (random ops'
bounds and parameters, dropout's p, roll's shifts, a compiled function's int argument) are
runtime arguments of the program, so 100 distinct values compile at most one program per form.
Values are compared with CPU PyTorch; random draws (whose streams differ from the CPU's) are
compared with the CPU applying the same transformation to the tpu's own uniform draws."""

import pytest
import torch
from torch.testing import assert_close

import torchtpu

VALUES = 100


def compiled():
    """Programs built: compiled by XLA or loaded from the disk cache (a program cache miss)."""
    m = torchtpu.metrics()
    return m["programs_compiled"] + m.get("disk_cache_hits", 0)


def compiles_after_first(fn, values):
    """Runs fn(v) for every value; returns (results, programs built after the first value)."""
    first = fn(values[0])
    torch.tpu.synchronize()
    before = compiled()
    results = [first] + [fn(v) for v in values[1:]]
    torch.tpu.synchronize()
    return results, compiled() - before


def test_uniform_bounds_are_runtime_values():
    bounds = [(-i / 7.0, i / 3.0 + 0.5) for i in range(VALUES)]

    def draw(ab):
        torch.manual_seed(0)
        return torch.empty(64, device="tpu").uniform_(*ab)

    results, n = compiles_after_first(draw, bounds)
    assert n == 0
    torch.manual_seed(0)
    u01 = torch.empty(64, device="tpu").uniform_(0, 1).cpu()
    for (a, b), got in zip(bounds, results):
        got = got.cpu()
        assert_close(got, u01 * (b - a) + a, rtol=1e-5, atol=1e-5)
        assert bool(((got >= a) & (got < b)).all())


def test_normal_mean_std_and_exponential_lambda_are_runtime_values():
    params = [(i * 0.1, 0.5 + i * 0.01) for i in range(VALUES)]

    def normal(ms):
        torch.manual_seed(1)
        return torch.empty(32, device="tpu").normal_(*ms)

    results, n = compiles_after_first(normal, params)
    assert n == 0
    torch.manual_seed(1)
    z = torch.empty(32, device="tpu").normal_(0, 1).cpu()
    for (mean, std), got in zip(params, results):
        assert_close(got.cpu(), z * std + mean, rtol=1e-5, atol=1e-5)

    def exponential(lam):
        torch.manual_seed(2)
        return torch.empty(32, device="tpu").exponential_(lam)

    lambdas = [0.25 + i * 0.05 for i in range(VALUES)]
    results, n = compiles_after_first(exponential, lambdas)
    assert n == 0
    for lam, got in zip(lambdas, results):
        assert_close(got.cpu() * lam, results[0].cpu() * lambdas[0], rtol=1e-4, atol=1e-5)


def test_bernoulli_p_is_a_runtime_value():
    ps = [i / (VALUES - 1) for i in range(VALUES)]

    def draw(p):
        torch.manual_seed(3)
        return torch.empty(256, device="tpu").bernoulli_(p)

    results, n = compiles_after_first(draw, ps)
    assert n == 0
    assert results[0].cpu().sum() == 0  # p = 0
    assert results[-1].cpu().sum() == 256  # p = 1
    # The same draws against a rising threshold: the kept set only grows.
    for lo, hi in zip(results, results[1:]):
        assert bool((hi.cpu() >= lo.cpu()).all())


def test_dropout_p_is_a_runtime_value_and_matches_its_mask():
    x = torch.randn(8, 32)
    xt = x.to("tpu")
    ps = [0.01 + i * 0.0098 for i in range(VALUES)]

    def drop(p):
        return torch.native_dropout(xt, p, True)

    results, n = compiles_after_first(drop, ps)
    assert n == 0
    for p, (out, mask) in zip(ps, results):
        mask = mask.cpu()
        assert_close(out.cpu(), x * mask * (1.0 / (1.0 - p)), rtol=1e-5, atol=1e-5)
    # F.dropout through autograd: the backward reapplies the mask with the same runtime scale.
    xg = xt.clone().requires_grad_()
    for p in (0.2, 0.7):
        out = torch.nn.functional.dropout(xg, p, training=True)
        out.sum().backward()
        assert_close(xg.grad.cpu(), (out.detach().cpu() != 0).float() / (1 - p), rtol=1e-5,
                     atol=1e-5)
        xg.grad = None
    # p = 0 and p = 1 through the same program.
    out0, mask0 = torch.native_dropout(xt, 0.0, True)
    out1, mask1 = torch.native_dropout(xt, 1.0, True)
    assert_close(out0.cpu(), x)
    assert bool(mask0.cpu().all()) and not bool(mask1.cpu().any())
    assert_close(out1.cpu(), torch.zeros_like(x))


def test_random_bounds_and_randint_are_runtime_values():
    bounds = [(-i, 3 * i + 1) for i in range(VALUES)]

    def draw(ab):
        return torch.empty(200, dtype=torch.int64, device="tpu").random_(*ab)

    results, n = compiles_after_first(draw, bounds)
    assert n == 0
    for (a, b), got in zip(bounds, results):
        got = got.cpu()
        assert bool(((got >= a) & (got < b)).all()), (a, b)
    assert len(set(results[-1].cpu().tolist())) > 50  # values spread over the range

    highs = list(range(2, VALUES + 2))
    results, n = compiles_after_first(lambda h: torch.randint(h, (100,), device="tpu"), highs)
    assert n == 0
    for h, got in zip(highs, results):
        got = got.cpu()
        assert bool(((got >= 0) & (got < h)).all())
    # The full int64 range and a wide range (over 2^32) draw from the same program family.
    full = torch.empty(1000, dtype=torch.int64, device="tpu").random_(-(2**63), None).cpu()
    assert (full < 0).any() and (full > 0).any()
    wide = torch.empty(1000, dtype=torch.int64, device="tpu").random_(0, 2**40).cpu()
    assert bool(((wide >= 0) & (wide < 2**40)).all()) and wide.max() > 2**33


BAD_CALLS = [
    (lambda t: t.exponential_(-1.0), "exponential_ expects lambda > 0.0"),
    (lambda t: t.geometric_(1.5), "geometric_ expects p to be in \\(0, 1\\)"),
    (lambda t: t.log_normal_(0, -1), "log_normal_ expects std > 0.0"),
    (lambda t: t.cauchy_(0, -1), "cauchy_ expects sigma > 0.0"),
    (lambda t: t.uniform_(2, 1), "uniform_ expects to return a \\[from, to\\) range"),
    (lambda t: t.random_(5, 5), "random_ expects 'from' to be less than 'to'"),
    (lambda t: t.random_(0), "random_ expects 'from' to be less than 'to'"),
    (lambda t: torch.native_dropout(t, 1.5, True), "bernoulli_ expects p to be in \\[0, 1\\]"),
]


@pytest.mark.parametrize("call,message", BAD_CALLS)
def test_random_parameters_are_checked_on_every_call(call, message):
    # The program exists already (built for good values): the host checks each new value.
    t = torch.empty(4, device="tpu")
    for good in (lambda t: t.exponential_(1.0), lambda t: t.geometric_(0.5),
                 lambda t: t.log_normal_(0, 1), lambda t: t.cauchy_(0, 1),
                 lambda t: t.uniform_(0, 1), lambda t: t.random_(0, 5),
                 lambda t: torch.native_dropout(t, 0.5, True)):
        good(t)
    with pytest.raises(RuntimeError, match=message):
        call(torch.empty(4))  # the CPU's error
    with pytest.raises(RuntimeError, match=message):
        call(t)
    assert_close((t.fill_(2.0) * 2).cpu(), torch.full((4,), 4.0))  # still usable


def test_roll_shifts_are_runtime_values():
    x = torch.randn(5, 7)
    xt = x.to("tpu")
    shifts = [s - 50 for s in range(VALUES)]
    results, n = compiles_after_first(lambda s: torch.roll(xt, s, 1), shifts)
    assert n == 0
    for s, got in zip(shifts, results):
        assert_close(got.cpu(), torch.roll(x, s, 1))
    pairs = [(s, -2 * s) for s in range(VALUES)]
    results, n = compiles_after_first(lambda p: torch.roll(xt, p, (0, 1)), pairs)
    assert n == 0
    for p, got in zip(pairs, results):
        assert_close(got.cpu(), torch.roll(x, p, (0, 1)))
    results, n = compiles_after_first(lambda s: torch.roll(xt, s), shifts)  # flattened
    assert n == 0
    for s, got in zip(shifts, results):
        assert_close(got.cpu(), torch.roll(x, s))


def test_narrow_copy_start_is_a_runtime_value():
    x = torch.randn(VALUES + 4, 6)
    xt = x.to("tpu")
    starts = list(range(VALUES))
    results, n = compiles_after_first(lambda i: torch.narrow_copy(xt, 0, i, 4), starts)
    assert n == 0
    for i, got in zip(starts, results):
        assert_close(got.cpu(), torch.narrow_copy(x, 0, i, 4))


def test_compiled_function_int_argument_is_a_runtime_value():
    from torchtpu import _dynamo

    torch._dynamo.reset()
    x, w = torch.randn(VALUES, 16), torch.randn(16, 8)
    xt, wt = x.to("tpu"), w.to("tpu")

    @torch.compile(backend="tpu")
    def row_matmul(x, w, i):
        return x[i] @ w

    @torch.compile(backend="tpu")
    def shift(x, i):
        return (x + i).sum(0) * i

    for fn, ref in ((row_matmul, lambda i: x[i] @ w), (shift, lambda i: (x + i).sum(0) * i)):
        args = (xt, wt) if fn is row_matmul else (xt,)
        graphs_before = set(_dynamo.graph_metrics())
        results, _ = compiles_after_first(lambda i: fn(*args, i), list(range(VALUES)))
        for i, got in enumerate(results):
            assert_close(got.cpu(), ref(i), rtol=1e-4, atol=1e-4)
        new = {k: v for k, v in _dynamo.graph_metrics().items() if k not in graphs_before}
        # Dynamo traces a static graph for the first value and a symbolic one from the second:
        # at most one program each, whatever the value.
        assert len(new) <= 2, new
        assert all(v.get("compiles", 0) <= 1 for v in new.values()), new
        assert not any("eager_reason" in v for v in new.values()), new
    # A negative index wraps like Python's; one out of range raises the CPU's IndexError.
    assert_close(row_matmul(xt, wt, -3).cpu(), x[-3] @ w, rtol=1e-4, atol=1e-4)
    with pytest.raises(IndexError, match="out of range"):
        row_matmul(xt, wt, VALUES + 5).cpu()
    assert_close(row_matmul(xt, wt, 7).cpu(), x[7] @ w, rtol=1e-4, atol=1e-4)
