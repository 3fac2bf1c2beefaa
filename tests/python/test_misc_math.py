"""Assorted ops on tpu against CPU PyTorch: nansum, aminmax, count_nonzero, trace,
logcumsumexp, cross, vdot, logspace, frexp, angle, logit backward, renorm, soft/hard shrink,
glu, prelu, erfcx, log_ndtr, ndtri (edge values included), with gradients where they exist.

Every test checks that no op ran through the CPU fallback.
"""

import pytest
import torch
import torch.nn.functional as F

from torchtpu.testing.fallbacks import assert_close_to_cpu, check_against_cpu

DEV = "tpu"
TOL = dict(rtol=1e-4, atol=1e-5)


pytestmark = pytest.mark.usefixtures("no_cpu_fallback")


def _close(a, e):
    assert_close_to_cpu(a, e, **TOL)


def _check(fn, *inputs, grad=True):
    check_against_cpu(fn, *inputs, grad=grad, **TOL)


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_reductions():
    x = _x(4, 5)
    x[1, 2] = float("nan")
    _check(torch.nansum, x, grad=False)
    _check(lambda t: torch.nansum(t, 1, keepdim=True), x, grad=False)
    _check(torch.aminmax, _x(4, 5), grad=False)
    _check(lambda t: torch.aminmax(t, dim=0, keepdim=True), _x(4, 5), grad=False)
    z = _x(4, 5)
    z[z < 0] = 0
    _check(lambda t: torch.count_nonzero(t, dim=(0,)), z, grad=False)
    _check(torch.count_nonzero, z, grad=False)
    _check(torch.trace, _x(4, 5))
    _check(torch.trace, torch.arange(12).reshape(3, 4), grad=False)


def test_logcumsumexp():
    x = _x(5, 3)
    _check(lambda t: torch.logcumsumexp(t, 0), x)
    x[2, 1] = float("-inf")
    x[:, 2] = float("-inf")
    x[3, 0] = float("inf")
    _check(lambda t: torch.logcumsumexp(t, 1), x, grad=False)


def test_cross_vdot_logspace():
    _check(lambda a, b: torch.linalg.cross(a, b), _x(4, 3), _x(4, 3, seed=1))
    _check(lambda a, b: torch.cross(a, b, dim=0), _x(3, 4), _x(3, 4, seed=1))
    _check(torch.vdot, _x(7), _x(7, seed=1))
    for start, end, steps, base in [(0, 3, 7, 10.0), (-2.5, 2.5, 6, 2.0), (1, 1, 1, 10.0)]:
        out = torch.logspace(start, end, steps, base, device=DEV)
        _close(out, torch.logspace(start, end, steps, base))


def test_frexp_angle():
    x = torch.tensor([0.0, -0.0, 1.0, 0.5, 3.0, -7.25, 1e-40, -1e-42, 3e38, float("inf"),
                      -float("inf"), float("nan"), 2.0 ** -126])
    m, e = torch.frexp(x.to(DEV))
    mc, ec = torch.frexp(x)
    torch.testing.assert_close(m.cpu(), mc, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(e.cpu()[x.isfinite()], ec[x.isfinite()])
    # angle of a negative subnormal is pi on CPU; XLA:CPU flushes it to -0 (angle 0)
    _check(torch.angle, x[(x.abs() >= 2.0 ** -126) | (x == 0) | x.isnan()], grad=False)


def test_logit_backward():
    x = torch.tensor([-0.5, 0.0, 0.01, 0.3, 0.5, 0.99, 1.0, 1.5])
    for eps in (None, 0.05):
        _check(lambda t: torch.logit(t, eps), x[2:6])
        g = torch.ones(8)
        out = torch.ops.aten.logit_backward(g.to(DEV), x.to(DEV), eps).cpu()
        torch.testing.assert_close(out, torch.ops.aten.logit_backward(g, x, eps), equal_nan=True)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
def test_renorm(p):
    _check(lambda t: torch.renorm(t, p, 0, 1.5), _x(3, 4) * 2)
    _check(lambda t: torch.renorm(t, p, 1, 0.5), _x(3, 4, 2) * 2)


def test_activations():
    x = torch.cat([_x(20), torch.tensor([0.5, -0.5, 0.0])])
    _check(F.softshrink, x)
    _check(lambda t: F.softshrink(t, 1.0), x)
    _check(F.hardshrink, x)
    _check(lambda t: F.glu(t, 0), _x(6, 3))
    _check(lambda t: F.glu(t), _x(2, 4))
    _check(F.prelu, _x(2, 3, 4), torch.tensor([0.25, -0.1, 2.0]))
    _check(F.prelu, _x(2, 3), torch.tensor([0.25]))


def test_normal_helpers():
    x = torch.cat([torch.linspace(-30, 30, 241), torch.tensor([0.0, 1e-8, 26.0, 1e4,
                                                                float("inf"), -float("inf"),
                                                                float("nan")])])
    _check(torch.special.erfcx, x, grad=False)
    _check(torch.special.log_ndtr, x, grad=False)
    _check(torch.special.erfcx, _x(16))
    _check(torch.special.log_ndtr, _x(16))
    p = torch.tensor([0.0, 1e-37, 1e-20, 1e-10, 1e-3, 0.1, 0.13, 0.14, 0.5, 0.7, 0.9, 0.999,
                      1.0 - 1e-7, 1.0, -0.1, 1.1, float("nan")])
    _check(torch.special.ndtri, p, grad=False)
    _check(torch.special.ndtri, torch.rand(16, generator=torch.Generator().manual_seed(0)))


def test_histc():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(3)) * 3
    x[6] = 2.0
    for args in [(10, 0, 0), (7, -1, 2), (100, -3.3, 4.1)]:
        torch.testing.assert_close(torch.histc(x.to(DEV), *args).cpu(), torch.histc(x, *args))
    x[5] = float("nan")  # NaN is left out when the range is given
    for args in [(7, -1, 2), (5, 2, 3)]:
        torch.testing.assert_close(torch.histc(x.to(DEV), *args).cpu(), torch.histc(x, *args))
    ones = torch.ones(5)
    torch.testing.assert_close(torch.histc(ones.to(DEV), 4).cpu(), torch.histc(ones, 4))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_integer_input_as_on_cuda(dtype):
    # CPU rejects integer histc; CUDA (and Transformers' MoE routing on accelerators) relies on
    # it: the bin is (x - min) * bins // (max - min) in int64 and the counts keep the dtype. On
    # these integer-spaced inputs it agrees with CPU's float histogram.
    x = torch.tensor([0, 3, 1, 1, 2, 7, 3, 3, 9, 5, 4], dtype=dtype)
    for args in [(4, 0, 3), (5, 0, 0), (3, 1, 8), (10, 0, 10), (3, 5, 5)]:
        out = torch.histc(x.to(DEV), *args)
        assert out.dtype == dtype
        assert out.cpu().tolist() == torch.histc(x.float(), *args).tolist(), args


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_pdist(p):
    a, b = _x(2, 4, 3), _x(2, 5, 3, seed=1)
    b[0, 1] = a[0, 2]  # a zero distance: its gradient is 0
    grad = p != 0.0
    _check(lambda u, v: torch.cdist(u, v, p=p, compute_mode="donot_use_mm_for_euclid_dist"),
           a, b, grad=grad)
    x = _x(5, 3)
    _check(lambda t: torch.nn.functional.pdist(t, p=p), x, grad=grad)


@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
def test_cummax_cummin(fn):
    nan = float("nan")
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, nan, 5.0, nan, -1.0],
                      [0.0, 0.0, -1.0, -1.0, 2.0, 2.0, 1.0, 7.0]])
    for d in (0, 1):
        a, e = fn(x.to(DEV), d), fn(x, d)
        torch.testing.assert_close(a.values.cpu(), e.values, equal_nan=True)
        torch.testing.assert_close(a.indices.cpu(), e.indices)
    i = torch.tensor([3, 1, 3, 5, 2, 5])
    torch.testing.assert_close(fn(i.to(DEV), 0).indices.cpu(), fn(i, 0).indices)
    _check(lambda t: fn(t, 1).values, _x(3, 6))


_WIDE_UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]


@pytest.mark.allow_fallback("aten::cummax", "aten::cummin", "aten::_logcumsumexp")
@pytest.mark.parametrize("name,dtype", [
    *[(n, d) for n in ("cummax", "cummin") for d in _WIDE_UNSIGNED],
    *[("logcumsumexp", d) for d in [torch.bool, torch.uint8, torch.int32, torch.int64,
                                    torch.uint16]],
], ids=str)
def test_scans_the_cpu_refuses_raise_its_error(name, dtype):
    # The CPU's kernels (and CUDA's) have no such form; tpu computed them (integer logcumsumexp
    # truncated into the integer dtype), so code that ran on tpu failed elsewhere. The lowering
    # refuses them: the counted CPU fallback raises the CPU's own error at the call. (float8
    # cummax/cummin stay computed, with the float8 family in test_float8.py.)
    fn = lambda t: getattr(torch, name)(t, 1)  # noqa: E731
    x = torch.tensor([[1.0, 3.0, 2.0], [0.0, 5.0, 4.0]]).to(dtype)
    with pytest.raises(NotImplementedError) as cpu_error:
        fn(x)
    with pytest.raises(NotImplementedError) as tpu_error:
        fn(x.to(DEV))
    assert str(tpu_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
def test_cummax_cummin_dtypes_the_cpu_has_stay_native(fn, dtype):
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 5.0], [2.0, 0.0, 1.0, 1.0, 7.0]]).to(dtype)
    for d in (0, 1):
        a, e = fn(x.to(DEV), d), fn(x, d)
        torch.testing.assert_close(a.values.cpu(), e.values)
        torch.testing.assert_close(a.indices.cpu(), e.indices)

def test_hash_tensor():
    for x in [torch.tensor([1.0, 2.0, -3.5, -0.0]), _x(3, 4), torch.arange(-5, 7).reshape(3, 4),
              torch.tensor([True, False, True])]:
        torch.testing.assert_close(torch.hash_tensor(x.to(DEV)).cpu(), torch.hash_tensor(x))
        torch.testing.assert_close(torch.hash_tensor(x.to(DEV), 0).cpu(), torch.hash_tensor(x, 0))


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0])
@pytest.mark.parametrize("x1_shape,x2_shape", [((3, 5), (0, 4, 5)), ((1, 3, 5), (0, 4, 5)),
                                               ((1, 3, 5), (2, 4, 5)), ((3, 5), (2, 4, 5))])
def test_cdist_backward_with_a_broadcast_batch(p, x1_shape, x2_shape):
    # x1 lacks the batch dim or has it as 1: its gradient is the sum over that batch (empty too).
    x1 = torch.randn(x1_shape, requires_grad=True)
    x2 = torch.randn(x2_shape, requires_grad=True)
    t1 = x1.detach().to("tpu").requires_grad_()
    t2 = x2.detach().to("tpu").requires_grad_()
    torch.cdist(t1, t2, p=p).sum().backward()
    torch.cdist(x1, x2, p=p).sum().backward()
    assert t1.grad.shape == x1.grad.shape
    torch.testing.assert_close(t1.grad.cpu(), x1.grad, rtol=1e-5, atol=1e-6)
