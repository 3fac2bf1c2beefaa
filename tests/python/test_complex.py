"""complex64/complex128 on tpu against CPU PyTorch: copies, aliasing views (view_as_real writes
reach the complex base), conj/neg bits, elementwise ops, the FFT family with every norm (native,
no CPU fallback) and a gradient through rfft -> abs -> sum. ComplexHalf has no XLA type."""

import pytest
import torch
from torch.testing import assert_close

from torchtpu.testing.fallbacks import fallback_counts

DEV = "tpu"
CDTYPES = [torch.complex64, torch.complex128]


def _crandn(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_copy_round_trip(dtype):
    x = _crandn(3, 5, dtype=dtype)
    t = x.to(DEV)
    assert t.dtype == dtype and t.device.type == DEV
    assert torch.equal(t.cpu(), x)
    assert torch.equal(t.clone().cpu(), x)  # tpu -> tpu
    assert torch.equal(t.t().contiguous().cpu(), x.t().contiguous())
    assert torch.equal(t[:, 1::2].cpu(), x[:, 1::2])
    other = torch.complex128 if dtype == torch.complex64 else torch.complex64
    assert torch.equal(t.to(other).cpu(), x.to(other))
    assert torch.equal(torch.zeros(4, dtype=dtype, device=DEV).cpu(), torch.zeros(4, dtype=dtype))
    y = torch.empty(3, 5, dtype=dtype, device=DEV)
    y.copy_(x)
    assert torch.equal(y.cpu(), x)
    assert t[1, 2].item() == x[1, 2].item()
    assert "j" in repr(t)


def test_real_to_complex_conversion():
    a = torch.randn(6)
    assert torch.equal(a.to(DEV).to(torch.complex64).cpu(), a.to(torch.complex64))


def test_chalf_not_supported():
    with pytest.raises(NotImplementedError, match="ComplexHalf"):
        torch.zeros(3, dtype=torch.complex32).to(DEV)


def test_view_as_real_aliases_base():
    x = _crandn(3, 4)
    t = x.to(DEV)
    r = torch.view_as_real(t)
    assert r._base is t or r.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    assert torch.equal(r.cpu(), torch.view_as_real(x))
    r[1, 2, 1] = 7.0
    r[0, :, 0].mul_(2)
    xr = torch.view_as_real(x)
    xr[1, 2, 1] = 7.0
    xr[0, :, 0].mul_(2)
    assert torch.equal(t.cpu(), x)
    # writes to the base reach the view
    t[2, 3] = 1 - 1j
    x[2, 3] = 1 - 1j
    assert torch.equal(r.cpu(), xr)
    assert torch.equal(t.real.cpu(), x.real) and torch.equal(t.imag.cpu(), x.imag)
    t.imag.fill_(0.5)
    x.imag.fill_(0.5)
    assert torch.equal(t.cpu(), x)


def test_view_as_complex():
    f = torch.randn(4, 6, 2)
    tf = f.to(DEV)
    c = torch.view_as_complex(tf)
    assert torch.equal(c.cpu(), torch.view_as_complex(f))
    c[1] = 3 + 4j
    torch.view_as_complex(f)[1] = 3 + 4j
    assert torch.equal(tf.cpu(), f)


def test_conj_and_neg_bits():
    x = _crandn(5)
    t = x.to(DEV)
    assert t.conj().is_conj()
    assert torch.equal(t.conj().cpu(), x.conj())
    assert torch.equal(t.conj().resolve_conj().cpu(), x.conj().resolve_conj())
    assert torch.equal(t.conj().clone().cpu(), x.conj().clone())
    assert torch.equal(torch.conj_physical(t).cpu(), torch.conj_physical(x))
    assert_close((t.conj() * t).cpu(), x.conj() * x)
    assert torch.equal(t.conj().imag.cpu(), x.conj().imag)
    y = torch.empty(5, dtype=torch.complex64, device=DEV)
    y.copy_(x.conj())
    assert torch.equal(y.cpu(), x.conj())


@pytest.mark.parametrize("dtype", CDTYPES)
def test_elementwise(dtype):
    a, b = _crandn(4, 3, dtype=dtype, seed=1), _crandn(4, 3, dtype=dtype, seed=2)
    ta, tb = a.to(DEV), b.to(DEV)
    for fn in (torch.add, torch.sub, torch.mul, torch.div):
        assert_close(fn(ta, tb).cpu(), fn(a, b))
    assert_close(ta.abs().cpu(), a.abs())
    assert_close(ta.angle().cpu(), a.angle())
    assert ta.abs().dtype == a.abs().dtype
    before = fallback_counts()
    ta.abs()
    ta.angle()
    torch.mul(ta, tb)
    assert fallback_counts() == before


def test_complex_and_polar():
    re, im = torch.randn(7), torch.randn(7)
    before = fallback_counts()
    got = torch.complex(re.to(DEV), im.to(DEV)).cpu()
    assert torch.equal(got, torch.complex(re, im))
    absv = re.abs()
    assert_close(torch.polar(absv.to(DEV), im.to(DEV)).cpu(), torch.polar(absv, im))
    assert fallback_counts() == before


FFTS = [
    ("fft", torch.fft.fft, "c", (3, 8), {}),
    ("fft_n", torch.fft.fft, "c", (3, 8), {"n": 5}),
    ("fft_n_pad", torch.fft.fft, "c", (3, 8), {"n": 11}),
    ("fftn_s_pad", torch.fft.fftn, "c", (3, 4), {"s": (5, 6)}),
    ("ifft", torch.fft.ifft, "c", (3, 8), {}),
    ("fft_real_in", torch.fft.fft, "r", (3, 8), {}),
    ("rfft", torch.fft.rfft, "r", (3, 8), {}),
    ("rfft_odd", torch.fft.rfft, "r", (4, 7), {"dim": 0}),
    ("irfft", torch.fft.irfft, "c", (3, 5), {}),
    ("irfft_n_odd", torch.fft.irfft, "c", (3, 5), {"n": 9}),
    ("irfft_n_pad", torch.fft.irfft, "c", (3, 5), {"n": 14}),
    ("fft2", torch.fft.fft2, "c", (2, 4, 6), {}),
    ("ifft2", torch.fft.ifft2, "c", (2, 4, 6), {}),
    ("fftn", torch.fft.fftn, "c", (2, 3, 4), {}),
    ("fftn_dims", torch.fft.fftn, "c", (2, 3, 4), {"dim": (0, 2)}),
    ("rfft2", torch.fft.rfft2, "r", (3, 4, 6), {}),
    ("rfftn", torch.fft.rfftn, "r", (3, 4, 5), {}),
    ("irfft2", torch.fft.irfft2, "c", (3, 4, 4), {}),
    ("irfftn", torch.fft.irfftn, "c", (3, 4, 5), {}),
    ("hfft", torch.fft.hfft, "c", (3, 5), {}),
    ("ihfft", torch.fft.ihfft, "r", (3, 8), {}),
]


@pytest.mark.parametrize("norm", [None, "forward", "backward", "ortho"])
@pytest.mark.parametrize("name,fn,kind,shape,kwargs", FFTS, ids=[f[0] for f in FFTS])
def test_fft(name, fn, kind, shape, kwargs, norm):
    x = _crandn(*shape) if kind == "c" else torch.randn(*shape)
    expected = fn(x, norm=norm, **kwargs)
    before = fallback_counts()
    got = fn(x.to(DEV), norm=norm, **kwargs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-4)
    after = fallback_counts()
    assert not any(k.startswith("aten::_fft") for k in after if after[k] != before.get(k, 0))


def test_fft_float64():
    x = torch.randn(4, 6, dtype=torch.float64)
    assert_close(torch.fft.rfft(x.to(DEV)).cpu(), torch.fft.rfft(x))
    c = _crandn(4, 6, dtype=torch.complex128)
    assert_close(torch.fft.ifft(c.to(DEV)).cpu(), torch.fft.ifft(c))


def test_rfft_abs_sum_grad():
    x = torch.randn(3, 10, dtype=torch.float32)
    xc = x.clone().requires_grad_()
    torch.fft.rfft(xc).abs().sum().backward()
    xt = x.to(DEV).requires_grad_()
    torch.fft.rfft(xt).abs().sum().backward()
    assert_close(xt.grad.cpu(), xc.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "name,fn",
    [
        ("isnan", torch.isnan),
        ("isinf", torch.isinf),
        ("var", torch.var),
        ("vdot", lambda z: torch.vdot(z[0], z[1])),
        ("norm", torch.linalg.norm),
        ("square", torch.square),
        ("exp", torch.exp),
        ("sum", torch.sum),
        ("isfinite", torch.isfinite),
    ],
)
def test_ops_with_nan_and_inf_entries_are_correct(name, fn):
    # Native (test_complex_ops.py) or through the CPU fallback, never a dropped imaginary part.
    x = _crandn(4, 4, seed=3)
    x[0, 0] = complex(float("nan"), 1.0)
    x[1, 2] = complex(1.0, float("inf"))
    expected = fn(x)
    got = fn(x.to(DEV)).cpu()
    assert got.dtype == expected.dtype
    assert_close(got, expected, equal_nan=True, atol=1e-4, rtol=1e-4)


def test_compile_complex_graph():
    # fft/abs and isnan of a complex value (either part NaN) lower natively in a graph.
    x = _crandn(6, seed=5)
    x[1] = complex(float("nan"), 0.0)
    f = torch.compile(lambda z: (z * 1.25).isnan(), backend="tpu")
    assert torch.equal(f(x.to(DEV)).cpu(), (x * 1.25).isnan())
    r = torch.randn(10)
    g = torch.compile(lambda v: torch.fft.rfft(v, norm="ortho").abs() * 2, backend="tpu")
    assert_close(g(r.to(DEV)).cpu(), torch.fft.rfft(r, norm="ortho").abs() * 2)
