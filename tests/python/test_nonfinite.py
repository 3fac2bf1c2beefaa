"""NaN / Inf reach exactly the outputs and gradients they reach on the CPU.

Resampling, adaptive average pooling and edge padding gather only the taps each output reads
(lowering/taps.h), forward and backward; a dense (out, in) weight matrix multiplied every other
element by a zero weight, and 0 * inf = NaN spread one non-finite value over a whole dim."""
import math

import pytest
import torch
import torch.nn.functional as F

import torchtpu

INF, NAN = math.inf, math.nan


def _fallbacks():
    return dict(torchtpu.metrics()["cpu_fallbacks_by_op"])


def _close(a, b):
    torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5, equal_nan=True)


def _check(fn, x, grad=None):
    """fn(x) and d fn / dx (for `grad`, default all ones) on tpu against CPU."""
    before = _fallbacks()
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    yc, yt = fn(xc), fn(xt)
    _close(yt, yc.detach())
    g = torch.ones_like(yc) if grad is None else grad
    yc.backward(g)
    yt.backward(g.to("tpu"))
    _close(xt.grad, xc.grad)
    assert _fallbacks() == before


def _nonfinite(shape, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(shape)
    flat = x.view(-1)
    flat[1], flat[flat.numel() // 2], flat[-2] = INF, -INF, NAN
    return x


def _nan_grad(y_shape):
    g = torch.randn(y_shape)
    g.view(-1)[0] = NAN
    g.view(-1)[-1] = INF
    return g


@pytest.mark.parametrize("out", [1, 3, 4, 7])
def test_adaptive_avg_pool1d_nonfinite(out):
    x = _nonfinite((2, 3, 10))
    _check(lambda t: F.adaptive_avg_pool1d(t, out), x)
    _check(lambda t: F.adaptive_avg_pool1d(t, out), torch.randn(2, 3, 10), _nan_grad((2, 3, out)))


@pytest.mark.parametrize("nd,out", [(2, (2, 3)), (2, (3, 5)), (3, (1, 2, 3)), (3, (2, 3, 4))])
def test_adaptive_avg_pool_nd_nonfinite(nd, out):
    shape = (2, 3, 4, 6) if nd == 2 else (1, 2, 3, 4, 5)
    fn = F.adaptive_avg_pool2d if nd == 2 else F.adaptive_avg_pool3d
    _check(lambda t: fn(t, out), _nonfinite(shape))
    _check(lambda t: fn(t, out), torch.randn(shape), _nan_grad((shape[0], shape[1]) + out))


@pytest.mark.parametrize("size", [(4, 5), (13, 17), (9, 6)])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_antialias_nonfinite(mode, size, dtype):
    x = _nonfinite((1, 2, 9, 11)).to(dtype)
    fn = lambda t: F.interpolate(t, size=size, mode=mode, antialias=True)  # noqa: E731
    _check(fn, x)
    _check(fn, torch.randn(1, 2, 9, 11, dtype=dtype), _nan_grad((1, 2) + size).to(dtype))


@pytest.mark.parametrize("mode,size", [("bilinear", (4, 5)), ("bilinear", (20, 23)),
                                       ("bicubic", (4, 5)), ("bicubic", (20, 23)),
                                       ("nearest", (20, 23)), ("nearest-exact", (4, 5))])
def test_upsample_nonfinite(mode, size):
    kw = {} if mode.startswith("nearest") else {"align_corners": False}
    fn = lambda t: F.interpolate(t, size=size, mode=mode, **kw)  # noqa: E731
    _check(fn, _nonfinite((1, 2, 9, 11)))
    _check(fn, torch.randn(1, 2, 9, 11), _nan_grad((1, 2) + size))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_edge_pad_backward_nonfinite(mode):
    fn = lambda t: F.pad(t, (2, 3, 1, 2), mode=mode)  # noqa: E731
    _check(fn, _nonfinite((1, 2, 5, 6)))
    _check(fn, torch.randn(1, 2, 5, 6), _nan_grad((1, 2, 8, 11)))


@pytest.mark.parametrize("name", ["i0", "special.i0e", "special.i1", "special.i1e",
                                  "special.modified_bessel_i0", "special.modified_bessel_i1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bessel_i_at_infinity(name, dtype):
    # Cephes' i0/i1 (the CPU kernels) give NaN at +-inf: exp(inf) * (c / sqrt(inf)) = inf * 0.
    fn = torch.i0 if name == "i0" else getattr(torch.special, name.split(".")[1])
    x = torch.tensor([INF, -INF, NAN, 0.0, 1.5, -3.0, 9.0, 100.0, 700.0], dtype=dtype)
    before = _fallbacks()
    _close(fn(x.to("tpu")), fn(x))
    assert _fallbacks() == before
