"""NaN / Inf reach exactly the outputs and gradients they reach on the CPU.

Resampling, adaptive average pooling and edge padding gather only the taps each output reads
(lowering/taps.h), forward and backward; a dense (out, in) weight matrix multiplied every other
element by a zero weight, and 0 * inf = NaN spread one non-finite value over a whole dim."""
import math

import pytest
import torch
import torch.nn.functional as F

from torchtpu.testing.fallbacks import fallback_counts

INF, NAN = math.inf, math.nan


def _close(a, b):
    torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5, equal_nan=True)


def _check(fn, x, grad=None):
    """fn(x) and d fn / dx (for `grad`, default all ones) on tpu against CPU."""
    before = fallback_counts()
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    yc, yt = fn(xc), fn(xt)
    _close(yt, yc.detach())
    g = torch.ones_like(yc) if grad is None else grad
    yc.backward(g)
    yt.backward(g.to("tpu"))
    _close(xt.grad, xc.grad)
    assert fallback_counts() == before


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
    before = fallback_counts()
    _close(fn(x.to("tpu")), fn(x))
    assert fallback_counts() == before


def _grid_nonfinite(shape):
    torch.manual_seed(1)
    g = torch.rand(shape) * 2.4 - 1.2
    flat = g.view(-1)
    flat[0], flat[3], flat[6], flat[-1] = NAN, INF, -INF, 1e30
    return g


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_2d_nonfinite_grid(mode, align):
    # zeros padding: a non-finite or huge coordinate samples nothing (the CPU kernels check
    # bounds on the coordinate). border/reflection with NaN crash torch 2.13's CPU kernel.
    x, grid = torch.randn(1, 2, 5, 6), _grid_nonfinite((1, 3, 4, 2))
    before = fallback_counts()
    xc, gc = x.clone().requires_grad_(), grid.clone().requires_grad_()
    xt, gt = x.to("tpu").requires_grad_(), grid.to("tpu").requires_grad_()
    fn = lambda a, g: F.grid_sample(a, g, mode=mode, align_corners=align)  # noqa: E731
    yc, yt = fn(xc, gc), fn(xt, gt)
    _close(yt, yc.detach())
    w = torch.randn(yc.shape)
    yc.backward(w)
    yt.backward(w.to("tpu"))
    _close(xt.grad, xc.grad)
    _close(gt.grad, gc.grad)
    assert fallback_counts() == before


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_nonfinite_grid(mode):
    # The 3-d kernel maps a coordinate outside int range (or not finite) to -100.
    x, grid = torch.randn(1, 2, 3, 4, 5), _grid_nonfinite((1, 2, 3, 2, 3))
    xc, gc = x.clone().requires_grad_(), grid.clone().requires_grad_()
    xt, gt = x.to("tpu").requires_grad_(), grid.to("tpu").requires_grad_()
    fn = lambda a, g: F.grid_sample(a, g, mode=mode, align_corners=False)  # noqa: E731
    yc, yt = fn(xc, gc), fn(xt, gt)
    _close(yt, yc.detach())
    yc.sum().backward()
    yt.sum().backward()
    _close(xt.grad, xc.grad)
    _close(gt.grad, gc.grad)


def _batch_norm_both(x, training, mean, var, weight, bias, eps=1e-5):
    out = []
    for dev in ("cpu", "tpu"):
        args = [None if t is None else t.clone().to(dev) for t in (mean, var, weight, bias)]
        xx = x.clone().to(dev).requires_grad_()
        for t in args[2:]:
            if t is not None:
                t.requires_grad_()
        y = F.batch_norm(xx, args[0], args[1], args[2], args[3], training=training, eps=eps)
        y.backward(torch.ones_like(y))
        out.append([y.detach(), xx.grad] + [t.grad for t in args[2:] if t is not None] +
                   [t for t in args[:2] if t is not None])
    return out


@pytest.mark.parametrize("case", ["nan_input_train", "inf_input_train", "nan_input_eval",
                                  "zero_var_eval", "nan_weight", "nan_running_stats"])
def test_batch_norm_nonfinite(case):
    torch.manual_seed(2)
    x = torch.randn(4, 3, 5)
    mean, var = torch.randn(3), torch.rand(3) + 0.5
    weight, bias = torch.randn(3), torch.randn(3)
    training, eps = True, 1e-5
    if case == "nan_input_train":
        x[0, 1, 2] = NAN
    elif case == "inf_input_train":
        x[2, 0, 1] = INF
    elif case == "nan_input_eval":
        x[0, 1, 2], training = NAN, False
    elif case == "zero_var_eval":
        # invstd = inf: the CPU's x * alpha + beta makes beta = bias - mean * inf, NaN where
        # the mean is 0: every element of that channel is NaN.
        mean[1], var[:], eps, training = 0.0, 0.0, 0.0, False
    elif case == "nan_weight":
        weight[2] = NAN
    else:
        mean[0], var[2], training = INF, NAN, False
    cpu, tpu = _batch_norm_both(x, training, mean, var, weight, bias, eps)
    for c, t in zip(cpu, tpu):
        _close(t, c)


# ---- transposed convolution with inf/NaN weights (issue 18: conv_transpose3d created NaNs) ----
# XLA's convolution multiplies every weight by the zeros it dilates and pads the input with, so a
# NaN weight made its whole output channel NaN; the CPU's gemm + col2im adds only real products,
# as the definition (the sum of x[i] * w[k] over i * stride + k * dilation - padding = o) does.
# The CPU's oneDNN path (float32 with batches, 1-D and 2-D here) multiplies by those zeros too, so
# the reference is the CPU with oneDNN off: its slow_conv_transpose kernels.

def _weight_with_nonfinite(shape, seed):
    w = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    flat = w.view(-1)
    flat[0], flat[flat.numel() // 3], flat[-1] = INF, NAN, -INF
    return w


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kw", [{}, {"stride": 2}, {"stride": 2, "padding": 1},
                                {"stride": 3, "padding": 1, "output_padding": 2},
                                {"dilation": 2, "padding": 1}, {"groups": 2, "stride": 2}],
                         ids=["plain", "stride", "stride_pad", "output_padding", "dilation",
                              "groups"])
def test_conv_transpose_nonfinite_weight(nd, kw):
    g = torch.Generator().manual_seed(nd)
    x = torch.randn((2, 4) + (5, 4, 3)[:nd], generator=g)
    x.view(-1)[7] = INF
    w = _weight_with_nonfinite((4, 3) + (3, 2, 2)[:nd], nd)
    conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
    before = fallback_counts()
    xs = [x.clone().requires_grad_(), x.to("tpu").requires_grad_()]
    ws = [w.clone().requires_grad_(), w.to("tpu").requires_grad_()]
    with torch.backends.mkldnn.flags(enabled=False):
        ys = [conv(xs[i], ws[i], **kw) for i in range(2)]
        _close(ys[1], ys[0].detach())
        for i in range(2):
            ys[i].sum().backward()
    _close(xs[1].grad, xs[0].grad)
    _close(ws[1].grad, ws[0].grad)
    assert fallback_counts() == before


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1}])
def test_conv_input_grad_nonfinite_weight(kw):
    # grad_input of a convolution is a transposed convolution of the output gradient.
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    w = _weight_with_nonfinite((4, 3, 3, 3), 1)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    with torch.backends.mkldnn.flags(enabled=False):
        F.conv2d(xc, w, **kw).sum().backward()
    F.conv2d(xt, w.to("tpu"), **kw).sum().backward()
    _close(xt.grad, xc.grad)


# ---- alpha == 0 in the add*mm family ----
# The CPU's BLAS calls skip the product when alpha == 0 (so an inf in a matrix does not become
# NaN) for float32/float64 addmm, addmv and addbmm and for baddbmm above its 400-element naive
# kernel, but not in its bfloat16 paths, its small-baddbmm kernel or addr: the CPU has no one
# rule. tpu follows the documented formula beta * input + alpha * (A @ B) (IEEE: 0 * inf = NaN),
# as those other CPU paths do; beta == 0 ignores the input, as documented.

@pytest.mark.parametrize("op", ["addmm", "addmv", "addbmm", "baddbmm", "addr"])
@pytest.mark.parametrize("beta", [1.0, 0.0])
def test_addmm_family_alpha_zero_follows_the_formula(op, beta):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 4, 5, generator=g), torch.randn(3, 5, 6, generator=g)
    a[0, 0, 0] = INF
    b[1, 1, 1] = NAN
    forms = {
        "addmm": (lambda t, x, y: torch.addmm(t, x, y, beta=beta, alpha=0.0),
                  torch.randn(4, 6, generator=g), a[0], b[1], lambda x, y: x @ y),
        "addmv": (lambda t, x, y: torch.addmv(t, x, y, beta=beta, alpha=0.0),
                  torch.randn(4, generator=g), a[0], b[0, :, 0], lambda x, y: x @ y),
        "addbmm": (lambda t, x, y: torch.addbmm(t, x, y, beta=beta, alpha=0.0),
                   torch.randn(4, 6, generator=g), a, b, lambda x, y: (x @ y).sum(0)),
        "baddbmm": (lambda t, x, y: torch.baddbmm(t, x, y, beta=beta, alpha=0.0),
                    torch.randn(3, 4, 6, generator=g), a, b, lambda x, y: x @ y),
        "addr": (lambda t, x, y: torch.addr(t, x, y, beta=beta, alpha=0.0),
                 torch.randn(4, 6, generator=g), a[0, :, 0], b[1, 1], torch.outer),
    }
    fn, t, x, y, product = forms[op]
    t.view(-1)[1] = NAN
    want = 0.0 * product(x, y) + (beta * t if beta else torch.zeros_like(t))
    got = fn(t.to("tpu"), x.to("tpu"), y.to("tpu"))
    _close(got, want)
    out = torch.empty(0, device="tpu")
    _close(getattr(torch, op)(t.to("tpu"), x.to("tpu"), y.to("tpu"), beta=beta, alpha=0.0,
                              out=out), want)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kw", [{"stride": 2}, {"stride": 3, "padding": 1},
                                {"stride": 2, "dilation": 2}, {"stride": 2, "groups": 2}],
                         ids=["stride", "stride_pad", "dilation", "groups"])
def test_conv_nonfinite_input(nd, kw):
    # The siblings of the transposed case: a regular convolution's input with inf/NaN (some at
    # positions the stride skips, which the weight gradient's dilated window must not touch).
    g = torch.Generator().manual_seed(nd)
    x = torch.randn((2, 4) + (7,) * nd, generator=g)
    x[(0, 1) + (6,) * nd] = INF
    x[(1, 2) + (5,) * nd] = NAN
    w = torch.randn((4, 4 // kw.get("groups", 1)) + (2,) * nd, generator=g)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    xs = [x.clone().requires_grad_(), x.to("tpu").requires_grad_()]
    ws = [w.clone().requires_grad_(), w.to("tpu").requires_grad_()]
    with torch.backends.mkldnn.flags(enabled=False):
        ys = [conv(xs[i], ws[i], **kw) for i in range(2)]
        for y in ys:
            y.sum().backward()
    _close(ys[1], ys[0].detach())
    _close(xs[1].grad, xs[0].grad)
    _close(ws[1].grad, ws[0].grad)


# ---- issue 18 items that were already right, kept right ----

def _both(fn, *inputs):
    before = fallback_counts()
    got = fn(*[t.to("tpu") for t in inputs])
    want = fn(*inputs)
    assert fallback_counts() == before
    return got, want


@pytest.mark.parametrize("name", ["ifft", "ifft2", "ifftn", "fft", "ihfft", "hfft", "irfft"])
def test_fft_of_real_input_with_nan(name):
    # fft.ifft of a real input with a NaN raised a view_as_real error on an unresolved conjugate.
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    x[1, 3] = NAN
    got, want = _both(getattr(torch.fft, name), x)
    _close(got, want)
    _close(torch.view_as_real(got.resolve_conj()) if got.is_complex() else got,
            torch.view_as_real(want.resolve_conj()) if want.is_complex() else want)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_cumprod_nonfinite(dtype):
    z = torch.randn(3, 8, dtype=dtype, generator=torch.Generator().manual_seed(1))
    z[0, 2] = complex(INF, 0)
    z[1, 5] = complex(0, NAN)
    z[2, 3] = complex(INF, 1)
    z[2, 6] = 0
    for dim in (0, 1):
        got, want = _both(lambda t: torch.cumprod(t, dim), z)
        _close(got, want)


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0, 1), (0.5, 2)])
def test_addbmm_baddbmm_out_nonfinite(beta, alpha):
    g = torch.Generator().manual_seed(2)
    b1, b2 = torch.randn(3, 4, 5, generator=g), torch.randn(3, 5, 6, generator=g)
    b1[0, 0, 0], b2[1, 1, 1] = INF, NAN
    i2, i3 = torch.randn(4, 6, generator=g), torch.randn(3, 4, 6, generator=g)
    i2[0, 1], i3[1, 2, 3] = NAN, NAN
    for op, inp in ((torch.addbmm, i2), (torch.baddbmm, i3)):
        want = op(inp, b1, b2, beta=beta, alpha=alpha)
        out = torch.empty(0, device="tpu")
        got = op(inp.to("tpu"), b1.to("tpu"), b2.to("tpu"), beta=beta, alpha=alpha, out=out)
        assert got is out
        _close(out, want)


# ---- FFTs of inputs with one inf or NaN (issue 18 leftover) ----
# Where a non-finite value lands in an FFT's output is not a math convention alone: every output
# of a transformed line sums that value times a twiddle factor, and a twiddle with an exactly
# zero part (+-1 or +-i: n*k a multiple of N/4) leaves that part of the product finite in exact
# arithmetic but NaN in IEEE arithmetic (inf * 0). Whether a library keeps the exact answer
# depends on its factorization: pocketfft (the CPU) does for some lengths and not others (an
# irfft of length 14 keeps the imaginary inf out of outputs 0 and 7; one of length 22 makes
# every output NaN), and XLA's FFT differs from pocketfft for lengths with factors 3 or 7
# (its NaN at irfft outputs 3, 5 and 7 of length 14, where the CPU gives -inf, inf and -0.07),
# as inf - inf inside a butterfly does. So these tests assert what holds for any algorithm,
# computed by exact-twiddle bookkeeping below: a part that is non-finite in exact arithmetic is
# non-finite on tpu (and on the CPU), a part that no non-finite value reaches is finite and
# matches the CPU, and a part reached only through an exactly-zero twiddle part may be either
# (finite ones match the CPU); where both sides give an infinity, its sign is the CPU's.
# A single special value per input keeps exact arithmetic free of inf - inf.

_FINITE, _NONFINITE, _EITHER = 0, 1, 2
_RANK = {_FINITE: 0, _EITHER: 1, _NONFINITE: 2}


def _times(status, twiddle_part_nonzero):
    if status == _FINITE:
        return _FINITE
    return status if twiddle_part_nonzero else _EITHER


def _sum(statuses):
    return max(statuses, key=_RANK.__getitem__, default=_FINITE)


def _cos_nonzero(k, n, size):
    m = (k * n) % size
    return 4 * m not in (size, 3 * size)


def _sin_nonzero(k, n, size):
    m = (k * n) % size
    return m != 0 and 2 * m != size


def _pass(re, im, dim, size, kind):
    """Part statuses after a 1-D transform of length `size` along `dim` (kind "c2c", "r2c":
    outputs 0..size//2, "c2r": Hermitian input, real output, imaginary parts of the zero and
    Nyquist terms ignored as documented for irfft)."""
    re, im = re.movedim(dim, -1), im.movedim(dim, -1)
    n_in = re.shape[-1] if kind != "c2r" else size // 2 + 1
    n_out = size // 2 + 1 if kind == "r2c" else size
    out_re = torch.zeros(re.shape[:-1] + (n_out,), dtype=torch.int64)
    out_im = torch.zeros_like(out_re)
    for idx in torch.cartesian_prod(*[torch.arange(s) for s in re.shape[:-1]]).reshape(
            -1, re.dim() - 1).tolist() if re.dim() > 1 else [[]]:
        line_re, line_im = re[tuple(idx)].tolist(), im[tuple(idx)].tolist()
        line_re += [_FINITE] * (n_in - len(line_re))
        line_im += [_FINITE] * (n_in - len(line_im))
        ks = range(n_in)
        for j in range(n_out):
            if kind == "c2r":
                # Z[k] and conj(Z[k]) at size - k contribute the same real part.
                terms = []
                for k in ks:
                    ignore_im = k == 0 or 2 * k == size
                    terms.append(_times(line_re[k], _cos_nonzero(k, j, size)))
                    if not ignore_im:
                        terms.append(_times(line_im[k], _sin_nonzero(k, j, size)))
                out_re[tuple(idx) + (j,)] = _sum(terms)
            else:
                out_re[tuple(idx) + (j,)] = _sum(
                    [_times(line_re[k], _cos_nonzero(k, j, size)) for k in ks]
                    + [_times(line_im[k], _sin_nonzero(k, j, size)) for k in ks])
                out_im[tuple(idx) + (j,)] = _sum(
                    [_times(line_re[k], _sin_nonzero(k, j, size)) for k in ks]
                    + [_times(line_im[k], _cos_nonzero(k, j, size)) for k in ks])
    return out_re.movedim(-1, dim), out_im.movedim(-1, dim)


def _statuses(x, passes):
    """Exact-twiddle part statuses of the output: (re, im) int tensors, or re alone for a real
    output. `passes` lists (dim, size, kind) in the order the transform runs them."""
    xr = torch.view_as_real(x) if x.is_complex() else torch.stack([x, torch.zeros_like(x)], -1)
    re = (~xr[..., 0].isfinite()).long()
    im = (~xr[..., 1].isfinite()).long()
    for dim, size, kind in passes:
        re, im = _pass(re, im, dim, size, kind)
    return re, im


FFT_FORMS = {
    # name: (call, passes for a (3, L) input, real output)
    "fft": (torch.fft.fft, lambda L: [(1, L, "c2c")], False),
    "ifft": (torch.fft.ifft, lambda L: [(1, L, "c2c")], False),
    "fft2": (torch.fft.fft2, lambda L: [(1, L, "c2c"), (0, 3, "c2c")], False),
    "ifftn": (torch.fft.ifftn, lambda L: [(0, 3, "c2c"), (1, L, "c2c")], False),
    "rfft": (torch.fft.rfft, lambda L: [(1, L, "r2c")], False),
    "ihfft": (torch.fft.ihfft, lambda L: [(1, L, "r2c")], False),
    "rfft2": (torch.fft.rfft2, lambda L: [(1, L, "r2c"), (0, 3, "c2c")], False),
    "irfft": (torch.fft.irfft, lambda L: [(1, 2 * (L - 1), "c2r")], True),
    "hfft": (torch.fft.hfft, lambda L: [(1, 2 * (L - 1), "c2r")], True),
    "irfft2": (torch.fft.irfft2, lambda L: [(0, 3, "c2c"), (1, 2 * (L - 1), "c2r")], True),
}


def _either_order(x, passes):
    # Multi-dim transforms may run their passes in either order: a part exact bookkeeping
    # calls finite or non-finite in one order but "either" in the other is "either".
    a = _statuses(x, passes)
    if len(passes) < 2 or passes[-1][2] == "c2r" or passes[0][2] == "r2c":
        return a
    b = _statuses(x, list(reversed(passes)))
    return tuple(torch.where(p == q, p, torch.full_like(p, _EITHER)) for p, q in zip(a, b))


@pytest.mark.parametrize("name", FFT_FORMS)
@pytest.mark.parametrize("length", [8, 12, 14, 15])
@pytest.mark.parametrize("special", [INF, -INF, NAN], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("part", ["real", "re", "im", "both"])
def test_fft_with_one_nonfinite_input(name, length, special, part):
    call, passes, real_out = FFT_FORMS[name]
    g = torch.Generator().manual_seed(length)
    if part == "real":
        x = torch.randn(3, length, generator=g)
        x[1, 3] = special
    else:
        if name in ("rfft", "ihfft", "rfft2"):
            return  # real-input transforms: a complex input is the CPU's error, not this test's
        x = torch.randn(3, length, dtype=torch.complex64, generator=g)
        x[1, 3] = complex(special if part in ("re", "both") else 0.5,
                          special if part in ("im", "both") else 0.5)
    before = fallback_counts()
    got = call(x.to("tpu")).cpu().resolve_conj()
    assert fallback_counts() == before
    want = call(x).resolve_conj()
    assert got.dtype == want.dtype and got.shape == want.shape
    re_st, im_st = _either_order(x, passes(length))
    if real_out:
        got_parts, want_parts, st = got.unsqueeze(-1), want.unsqueeze(-1), re_st.unsqueeze(-1)
    else:
        got_parts, want_parts = torch.view_as_real(got), torch.view_as_real(want)
        st = torch.stack([re_st, im_st], -1)
    assert st.shape == got_parts.shape
    got_nf, want_nf = ~got_parts.isfinite(), ~want_parts.isfinite()
    must = st == _NONFINITE
    assert got_nf[must].all() and want_nf[must].all()
    clean = st == _FINITE
    assert not got_nf[clean].any() and not want_nf[clean].any()
    both_finite = ~got_nf & ~want_nf
    torch.testing.assert_close(got_parts[both_finite], want_parts[both_finite], rtol=1e-4,
                               atol=1e-4)
    both_inf = got_parts.isinf() & want_parts.isinf()
    assert torch.equal(got_parts[both_inf], want_parts[both_inf])
