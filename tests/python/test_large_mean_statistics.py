"""Statistics of data whose mean is large against its spread, against a float64 reference (issue
32). Summing x in float32 holds n copies of the offset, so the rounding of the sum, not of the
data, set the accuracy of batch norm's mean and output: for x = off + randn(2, 8, 16, 16) tpu's
output error was 8.6e-6 / 5.3e-5 / 6.2e-4 at off = 10 / 100 / 1000 where the CPU's (which
accumulates in double) was 1.0e-6 / 4.9e-6 / 7.2e-5. The lowerings now sum deviations from one
element of each group (lowering/common.h's center, two-pass on shifted data), in eager and
compiled programs alike: the errors below do not grow with the offset.

The bounds are absolute, for unit-spread data: a few float32 ulps of the normalized output (or of
the statistic), far below what the offset used to cost (the offsets go to 1e4, where the old
error was ~2e-3)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_cpu_fallback")

OFFSETS = [10.0, 100.0, 1000.0, 1e4]


def data(off, shape=(2, 8, 16, 16), seed=0):
    g = torch.Generator().manual_seed(seed)
    return off + torch.randn(*shape, generator=g)


def err(got, ref):
    return (got.detach().cpu().double() - ref.detach().double()).abs().max().item()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("off", OFFSETS)
def test_batch_norm_training_at_large_means(off, compiled):
    x = data(off)
    g = torch.Generator().manual_seed(1)
    w, b = torch.rand(8, generator=g) + 0.5, torch.randn(8, generator=g)
    go = torch.randn(2, 8, 16, 16, generator=g)

    def bn(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True)

    fn = torch.compile(bn, backend="tpu") if compiled else bn

    def run(f, dev, dtype):
        xs, ws, bs = (t.to(dtype).to(dev).detach().requires_grad_() for t in (x, w, b))
        y = f(xs, ws, bs)
        y.backward(go.to(dtype).to(dev))
        return y, xs.grad, ws.grad

    y_ref, gx_ref, gw_ref = run(bn, "cpu", torch.float64)
    y_cpu, gx_cpu, gw_cpu = run(bn, "cpu", torch.float32)
    y, gx, gw = run(fn, "tpu", torch.float32)
    # The output: a few ulps whatever the offset (the CPU's own error grows with it: 7e-4 at 1e4).
    assert err(y, y_ref) < 2e-6
    # The gradients read the saved (float32-rounded) mean, as the CPU's do: no worse than it.
    assert err(gx, gx_ref) <= 1.5 * err(gx_cpu, gx_ref) + 1e-6
    assert err(gw, gw_ref) <= 1.5 * err(gw_cpu, gw_ref) + 1e-5
    # The saved statistics: the mean within an ulp of float32 at its size, invstd within 1e-6.
    _, mean, invstd = torch.native_batch_norm(x.to("tpu"), None, None, None, None, True, 0.1,
                                              1e-5)
    x64 = x.double()
    m64 = x64.mean((0, 2, 3))
    assert err(mean, m64) <= m64.abs().max().item() * 2**-23
    inv64 = (x64.var((0, 2, 3), unbiased=False) + 1e-5).rsqrt()
    assert err(invstd, inv64) <= 1e-6 * inv64.max().item()


@pytest.mark.parametrize("off", OFFSETS)
def test_batch_norm_module_running_stats_at_large_means(off):
    m = torch.nn.BatchNorm2d(8, momentum=1.0)  # running stats = this batch's
    mt = torch.nn.BatchNorm2d(8, momentum=1.0).to("tpu")
    x = data(off)
    y = mt(x.to("tpu"))
    m(x)
    x64 = x.double()
    assert err(y, (x64 - x64.mean((0, 2, 3), keepdim=True))
               / (x64.var((0, 2, 3), unbiased=False, keepdim=True) + 1e-5).sqrt()) < 2e-6
    assert err(mt.running_mean, x64.mean((0, 2, 3))) <= off * 2**-23 * 2
    assert err(mt.running_var, x64.var((0, 2, 3))) < 2e-6


NORMS = {
    "layer_norm": lambda t: F.layer_norm(t, t.shape[-2:]),
    "group_norm": lambda t: F.group_norm(t, 4),
    "instance_norm": lambda t: F.instance_norm(t),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(NORMS))
@pytest.mark.parametrize("off", OFFSETS)
def test_other_norms_at_large_means(off, name, compiled):
    fn = NORMS[name]
    x = data(off)
    f = torch.compile(fn, backend="tpu") if compiled else fn
    ref = fn(x.double())
    assert err(f(x.to("tpu")), ref) < 2e-6


STATS = {
    "var": lambda t: t.var(dim=1),
    "var_all": lambda t: t.var(),
    "std": lambda t: t.std(dim=1),
    "var_mean": lambda t: torch.stack(torch.var_mean(t, dim=1)),
    "std_mean": lambda t: torch.stack(torch.std_mean(t, dim=1, correction=0)),
    "cov": lambda t: torch.cov(t[:4]),
    "corrcoef": lambda t: torch.corrcoef(t[:4]),
}


@pytest.mark.parametrize("name", sorted(STATS))
@pytest.mark.parametrize("off", OFFSETS)
def test_variances_at_large_means(off, name):
    fn = STATS[name]
    x = data(off, shape=(16, 512))
    ref = fn(x.double())
    got = fn(x.to("tpu"))
    # Relative to the statistic's own size (the means in var_mean/std_mean are ~off).
    scale = ref.abs().clamp(min=1.0)
    assert ((got.cpu().double() - ref) / scale).abs().max().item() < 1e-6


def test_complex_variance_at_large_means():
    g = torch.Generator().manual_seed(2)
    z = torch.complex(1000 + torch.randn(16, 512, generator=g), -500 + torch.randn(16, 512,
                                                                                   generator=g))
    ref = z.to(torch.complex128).var(dim=1)
    assert err(z.to("tpu").var(dim=1), ref) < 2e-6


def test_special_values_keep_their_meaning():
    # A non-finite first element (the shift) is not used as one: inf and NaN propagate as in the
    # plain two-pass form, and constant groups have zero variance exactly.
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[inf, 1.0, 2.0], [1.0, inf, 2.0], [nan, 1.0, 2.0], [5.0, 5.0, 5.0],
                      [-inf, inf, 0.0], [1.0, -inf, 0.0]])
    for fn in (lambda t: t.var(dim=1), lambda t: F.layer_norm(t, (3,)),
               lambda t: F.batch_norm(t.t().reshape(1, 3, 6), None, None, training=True)):
        torch.testing.assert_close(fn(x.to("tpu")).cpu(), fn(x), equal_nan=True)
    # var_mean's mean is the mean (the CPU's Welford update turns an infinite element's mean into
    # NaN: inf + (1 - inf) / 2).
    torch.testing.assert_close(torch.var_mean(x.to("tpu"), dim=1)[1].cpu(), x.mean(dim=1),
                               equal_nan=True)
    assert torch.equal(x[3:4].to("tpu").var(dim=1).cpu(), torch.zeros(1))
