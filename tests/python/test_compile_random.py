"""Random factories, bernoulli's probability check and fill-value overflow in compiled graphs.

Before these lowerings existed, a graph holding aten::rand (or randn_like, randint, randperm,
normal.float_float, prims.convert_element_type) ran eagerly, and the bernoulli decomposition
(rand_like(p) < p) dropped the CPU's check that p is in [0, 1]: p = 2 gave ones, silently.
Each graph here must run as ONE compiled program (no eager_reason) and agree with the CPU:
same range and distribution for the random ops (the streams differ), same errors for bad input.
"""

from __future__ import annotations

import pytest
import torch

import torchtpu._dynamo as tpu_dynamo
from conftest import new_graphs

N = 4096


def compiled_once(fn, *args):
    """fn compiled for tpu, run on `args`; asserts its graphs ran as compiled programs."""
    before = tpu_dynamo.graph_metrics()
    out = torch.compile(fn, backend="tpu")(*args)
    graphs = new_graphs(before)
    assert graphs, "no graph was compiled"
    eager = {k: v["eager_reason"] for k, v in graphs.items() if "eager_reason" in v}
    assert not eager, eager
    return out


def assert_same_distribution(tpu: torch.Tensor, cpu: torch.Tensor):
    """Mean and standard deviation agree within 6 standard errors of their difference."""
    t, c = tpu.cpu().double(), cpu.double()
    tol = 6 * c.std().item() * (2 / c.numel()) ** 0.5
    assert abs(t.mean() - c.mean()) < tol, (t.mean(), c.mean(), tol)
    assert abs(t.std() - c.std()) < tol, (t.std(), c.std(), tol)


FACTORIES = {
    "rand": lambda x: torch.rand(N, device=x.device),
    "rand_half": lambda x: torch.rand(N, device=x.device, dtype=torch.float16),
    "rand_like": lambda x: torch.rand_like(x),
    "randn": lambda x: torch.randn(N, device=x.device),
    "randn_like": lambda x: torch.randn_like(x),
    "normal": lambda x: torch.normal(2.0, 3.0, (N,), device=x.device),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_random_factory_compiles_and_matches_cpu_distribution(fresh_dynamo, name):
    torch.manual_seed(0)
    fn = FACTORIES[name]
    x = torch.zeros(N)
    out = compiled_once(fn, x.to("tpu"))
    ref = fn(x)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if name.startswith("rand") and "randn" not in name:
        assert 0 <= out.min().item() and out.max().item() < 1  # [0, 1) as on the CPU
    assert_same_distribution(out, ref)


def test_random_factories_advance_and_reseed(fresh_dynamo):
    f = torch.compile(lambda x: torch.rand(64, device=x.device) + x, backend="tpu")
    x = torch.zeros(64, device="tpu")
    torch.manual_seed(7)
    a, b = f(x).cpu(), f(x).cpu()
    assert not torch.equal(a, b)  # each call draws new numbers, as torch.rand does
    torch.manual_seed(7)
    assert torch.equal(f(x).cpu(), a)  # the seed reproduces the stream
    # Two random ops of one graph draw independent streams.
    g = torch.compile(lambda x: torch.stack([torch.rand_like(x), torch.rand_like(x)]),
                      backend="tpu")
    two = g(x).cpu()
    assert not torch.equal(two[0], two[1])


@pytest.mark.parametrize("low,high,dtype", [(0, 10, torch.int64), (-5, 3, torch.int32),
                                            (0, 256, torch.uint8)])
def test_randint_compiles_and_covers_the_cpu_range(fresh_dynamo, low, high, dtype):
    def fn(x):
        return torch.randint(low, high, (N,), device=x.device, dtype=dtype), \
            torch.randint_like(x, low, high)

    x = torch.zeros(N, dtype=dtype)
    out, like = compiled_once(fn, x.to("tpu"))
    ref, ref_like = fn(x)
    assert out.dtype == ref.dtype and like.dtype == ref_like.dtype
    # N draws over at most 256 values: every value of the CPU's range appears, none outside it.
    assert set(out.cpu().tolist()) == set(ref.tolist()) == set(range(low, high))
    assert set(like.cpu().tolist()) == set(ref_like.tolist())


def test_randperm_compiles_to_a_permutation(fresh_dynamo):
    out = compiled_once(lambda x: torch.randperm(1000, device=x.device) + x, torch.zeros(
        1000, dtype=torch.int64, device="tpu")).cpu()
    ref = torch.randperm(1000)
    assert out.dtype == ref.dtype
    assert torch.equal(out.sort().values, ref.sort().values)
    assert not torch.equal(out, torch.arange(1000))  # shuffled (odds of identity: 1/1000!)


def test_compiled_bernoulli_checks_probabilities_like_cpu(fresh_dynamo):
    torch.manual_seed(0)
    f = torch.compile(lambda p: torch.bernoulli(p), backend="tpu")
    with pytest.raises(RuntimeError, match=r"p_in >= 0 && p_in <= 1"):
        torch.bernoulli(torch.full((4,), 2.0))
    with pytest.raises(RuntimeError, match=r"p_in >= 0 && p_in <= 1"):
        f(torch.full((4,), 2.0, device="tpu")).cpu()
    with pytest.raises(RuntimeError, match=r"p_in >= 0 && p_in <= 1"):
        f(torch.full((4,), -0.5, device="tpu")).cpu()
    # The process stays usable, and good probabilities give the CPU's results.
    p = torch.tensor([0.0, 1.0, 0.0, 1.0])
    before = tpu_dynamo.graph_metrics()
    assert torch.equal(f(p.to("tpu")).cpu(), torch.bernoulli(p))
    graphs = new_graphs(before)
    assert not [g for g in graphs.values() if "eager_reason" in g], graphs
    half = compiled_once(lambda p: torch.bernoulli(p), torch.full((N,), 0.5, device="tpu"))
    assert_same_distribution(half, torch.bernoulli(torch.full((N,), 0.5)))


def test_compiled_bernoulli_float_p_checked(fresh_dynamo):
    f = torch.compile(lambda x: x.clone().bernoulli_(1.5), backend="tpu")
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\]"):
        torch.zeros(4).bernoulli_(1.5)
    with pytest.raises(Exception, match=r"bernoulli_ expects p to be in \[0, 1\]"):
        f(torch.zeros(4, device="tpu")).cpu()


@pytest.mark.parametrize("fn", [
    lambda x: torch.full((3,), 300, dtype=torch.uint8, device=x.device),
    lambda x: torch.full_like(x, 256),
    lambda x: x.new_full((2,), 256),
    lambda x: x.clone().fill_(1000),
    lambda x: x.masked_fill(x == 0, 300),
], ids=["full", "full_like", "new_full", "fill_", "masked_fill"])
def test_compiled_fill_overflow_raises_like_cpu(fresh_dynamo, fn):
    x = torch.zeros(3, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8_t without overflow"):
        fn(x)
    with pytest.raises(Exception, match="cannot be converted to type uint8_t without overflow"):
        torch.compile(fn, backend="tpu")(x.to("tpu")).cpu()
    # Still usable; a value that fits gives the CPU's result in one compiled program.
    ok = compiled_once(lambda x: torch.full((3,), 255, dtype=torch.uint8, device=x.device) + x,
                       x.to("tpu"))
    assert torch.equal(ok.cpu(), torch.full((3,), 255, dtype=torch.uint8))


def test_prims_convert_element_type_in_graph(fresh_dynamo):
    # torch.renorm's reference decomposition casts with prims.convert_element_type.
    a = torch.randn(4, 5).half()
    out = compiled_once(lambda a: torch.renorm(a, 2, 0, 1.0), a.to("tpu"))
    torch.testing.assert_close(out.cpu(), torch.renorm(a, 2, 0, 1.0), atol=1e-3, rtol=1e-3)
