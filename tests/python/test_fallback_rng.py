"""Random ops that run through the CPU fallback draw from the tpu generator.

The CPU kernels refuse a tpu generator ("Expected a 'cpu' generator device"), so the fallback
hands them a CPU generator seeded from the tpu generator's (seed, offset) and advances the
offset: a seeded tpu generator (or torch.tpu.manual_seed) reproduces fallback draws, and
successive calls differ. Ops whose Python meta kernels refuse generators (exponential_,
log_normal_, cauchy_, geometric_) run natively with one, and so do randperm, _standard_gamma,
_sample_dirichlet, poisson and binomial now: the same contract (seeded, reproducible, advancing)
holds for them natively."""
import pytest
import torch

import torchtpu

T = dict(device="tpu")

OPS = {
    "randperm": lambda g: torch.randperm(50, generator=g, **T),
    "binomial": lambda g: torch.binomial(torch.full((200,), 10.0, **T),
                                         torch.full((200,), 0.3, **T), generator=g),
    "_standard_gamma": lambda g: torch._standard_gamma(torch.full((200,), 2.0, **T), generator=g),
    "_sample_dirichlet": lambda g: torch._sample_dirichlet(torch.full((50, 4), 2.0, **T),
                                                           generator=g),
    "poisson": lambda g: torch.poisson(torch.full((200,), 3.0, **T), generator=g),
    "normal_tensor_tensor": lambda g: torch.normal(torch.zeros(200, **T), torch.ones(200, **T),
                                                   generator=g),
    "normal_tensor_float": lambda g: torch.normal(torch.zeros(200, **T), 2.0, generator=g),
    "normal_float_tensor": lambda g: torch.normal(1.0, torch.ones(200, **T), generator=g),
    "normal_float_float": lambda g: torch.normal(0.0, 1.0, (200,), generator=g, **T),
    "normal_": lambda g: torch.empty(200, **T).normal_(generator=g),
    "log_normal_": lambda g: torch.empty(200, **T).log_normal_(generator=g),
    "exponential_": lambda g: torch.empty(200, **T).exponential_(generator=g),
    "cauchy_": lambda g: torch.empty(200, **T).cauchy_(generator=g),
    "geometric_": lambda g: torch.empty(200, **T).geometric_(0.3, generator=g),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_tpu_generator_reproduces_and_advances(name):
    fn = OPS[name]
    g = torch.Generator(device="tpu")
    g.manual_seed(1234)
    a = fn(g).cpu()
    g.manual_seed(1234)
    b = fn(g).cpu()
    c = fn(g).cpu()
    assert torch.equal(a, b), "the same seed must give the same draws"
    assert not torch.equal(b, c), "the generator must advance"
    assert a.device.type == "cpu" and torch.isfinite(a.double()).all() or name == "cauchy_"


@pytest.mark.parametrize("name", ["randperm", "binomial", "_standard_gamma", "poisson"])
def test_default_generator_follows_tpu_manual_seed(name):
    fn = OPS[name]
    torch.tpu.manual_seed(7)
    a = fn(None).cpu()
    torch.tpu.manual_seed(7)
    b = fn(None).cpu()
    assert torch.equal(a, b)
    assert not torch.equal(b, fn(None).cpu())


def test_fallback_draws_have_the_cpu_distribution():
    g = torch.Generator(device="tpu")
    g.manual_seed(0)
    n = 20000
    b = torch.binomial(torch.full((n,), 10.0, **T), torch.full((n,), 0.3, **T), generator=g).cpu()
    assert abs(b.mean().item() - 3.0) < 0.1 and abs(b.var().item() - 2.1) < 0.15
    gm = torch._standard_gamma(torch.full((n,), 2.0, **T), generator=g).cpu()
    assert abs(gm.mean().item() - 2.0) < 0.08 and abs(gm.var().item() - 2.0) < 0.2
    p = torch.randperm(1000, generator=g, **T).cpu()
    assert torch.equal(p.sort().values, torch.arange(1000))
    d = torch._sample_dirichlet(torch.full((n, 3), 1.0, **T), generator=g).cpu()
    torch.testing.assert_close(d.sum(-1), torch.ones(n), rtol=1e-5, atol=1e-5)
    assert (d.mean(0) - 1 / 3).abs().max().item() < 0.02


@pytest.mark.parametrize("name", ["randperm", "binomial", "poisson", "_standard_gamma"])
def test_cpu_generator_for_a_native_random_op_raises_like_cuda(name):
    # These ops run natively now, so a CPU generator is refused as every native random op (and
    # CUDA, for a cuda tensor) refuses it, naming the device types; the process stays usable.
    with pytest.raises(RuntimeError, match="Expected a 'tpu' device type for generator"):
        OPS[name](torch.Generator().manual_seed(5))
    assert OPS[name](None).device.type == "tpu"


def test_fallback_ops_are_counted():
    before = dict(torchtpu.metrics()["cpu_fallbacks_by_op"])
    # The random ops that used to fall back are native now; linalg_eig still takes the fallback.
    torch.linalg.eig(torch.eye(3, **T))
    after = torchtpu.metrics()["cpu_fallbacks_by_op"]
    assert after.get("aten::linalg_eig", 0) == before.get("aten::linalg_eig", 0) + 1
