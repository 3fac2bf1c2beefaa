"""Native complex64/complex128 ops on tpu against CPU PyTorch: every op whose descriptor declares
`kComplex` (beside its TORCHTPU_LOWERING registration, csrc/lowering/lowering.h) runs without the
CPU fallback and matches CPU values, dtypes and shapes; branch cuts follow the sign of a zero part
like CPU; ops without a complex lowering still take the fallback; Python complex constants work
under torch.compile; ComplexHalf gives a clear error."""

import math
import warnings

import pytest
import torch
from torch.testing import assert_close

from torchtpu import _dynamo as tpu_dynamo
from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

DEV = "tpu"
CDTYPES = [torch.complex64, torch.complex128]
# float32-level for complex64; complex128 results agree to within a few ulps of f64 math.
TOL = {torch.complex64: dict(rtol=1e-5, atol=1e-6),
       torch.complex128: dict(rtol=1e-10, atol=1e-12)}
REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _crandn(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def _on(t, like):
    return t.to(like.device)


def _zeroish(z):
    # zeroes one part or both in a pattern: real-only, imaginary-only and zero entries
    keep_re = _on(torch.tensor([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 0, 0]]), z).to(z.real.dtype)
    keep_im = _on(torch.tensor([[0, 1, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]]), z).to(z.real.dtype)
    return torch.complex(z.real * keep_re, z.imag * keep_im)


MASK = torch.tensor([[True, False, True, False], [False, False, True, True], [True] * 4])
IDX = torch.tensor([2, 0, 1, 2])
GIDX = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0], [1, 1, 1, 1]])

# name -> fn(a, b) with a, b complex (3, 4) tensors on one device.
OPS = {
    # arithmetic, real and complex scalars
    "add": lambda a, b: a + b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=2),
    "rsub_scalar": lambda a, b: 1.5 - a,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "mul_real_scalar": lambda a, b: a * 2.5,
    "div_real_scalar": lambda a, b: a / 2.5,
    "mul_complex_scalar": lambda a, b: a * 0.5j,
    "add_complex_scalar": lambda a, b: a + (1 + 2j),
    "mul_real_tensor": lambda a, b: a * b.real,
    "real_tensor_times_j": lambda a, b: a.real * 0.5j,
    "neg": lambda a, b: -a,
    "reciprocal": lambda a, b: a.reciprocal(),
    "pow_tensor": lambda a, b: torch.pow(a, b),
    "pow_real_scalar": lambda a, b: a ** 2.5,
    "pow_int_scalar": lambda a, b: a ** 3,
    "pow_complex_scalar": lambda a, b: a ** (1 + 0.5j),
    "pow_scalar_base": lambda a, b: 2.0 ** a,
    "square": lambda a, b: a.square(),
    "addcmul": lambda a, b: torch.addcmul(a, a, b, value=0.5),
    "addcdiv": lambda a, b: torch.addcdiv(a, a, b, value=2),
    "lerp_scalar": lambda a, b: torch.lerp(a, b, 0.3),
    "lerp_complex_weight": lambda a, b: torch.lerp(a, b, 0.7 - 0.2j),
    "lerp_tensor": lambda a, b: torch.lerp(a, b, (a * b) / 2),
    "conj_physical": lambda a, b: torch.conj_physical(a),
    "conj_mul": lambda a, b: a.conj() * b,
    "real_view": lambda a, b: a.real * 2,
    "imag_view": lambda a, b: a.imag * 2,
    "abs": lambda a, b: a.abs(),
    "angle": lambda a, b: a.angle(),
    "sgn": lambda a, b: a.sgn(),
    # transcendental
    "exp": lambda a, b: a.exp(),
    "expm1": lambda a, b: a.expm1(),
    "log": lambda a, b: a.log(),
    "log1p": lambda a, b: a.log1p(),
    "log2": lambda a, b: a.log2(),
    "log10": lambda a, b: a.log10(),
    "sqrt": lambda a, b: a.sqrt(),
    "rsqrt": lambda a, b: a.rsqrt(),
    "sin": lambda a, b: a.sin(),
    "cos": lambda a, b: a.cos(),
    "tan": lambda a, b: a.tan(),
    "sinh": lambda a, b: a.sinh(),
    "cosh": lambda a, b: a.cosh(),
    "tanh": lambda a, b: a.tanh(),
    "asin": lambda a, b: a.asin(),
    "acos": lambda a, b: a.acos(),
    "atan": lambda a, b: a.atan(),
    "asinh": lambda a, b: a.asinh(),
    "acosh": lambda a, b: a.acosh(),
    "atanh": lambda a, b: a.atanh(),
    "sigmoid": lambda a, b: a.sigmoid(),
    # predicates and comparisons
    "isnan": lambda a, b: torch.isnan(a),
    "isinf": lambda a, b: torch.isinf(a),
    "isfinite": lambda a, b: torch.isfinite(a),
    "eq": lambda a, b: a == b,
    "eq_self": lambda a, b: a == a,
    "ne": lambda a, b: a != b,
    "eq_complex_scalar": lambda a, b: a == (1 + 2j),
    "real_eq_complex_scalar": lambda a, b: a.real == (1 + 2j),
    "real_ne_complex_scalar": lambda a, b: a.real != (1 + 0j),
    # truthiness: nonzero when either part is (0 + 1j is true)
    "logical_not": lambda a, b: torch.logical_not(_zeroish(a)),
    "logical_and": lambda a, b: torch.logical_and(_zeroish(a), _zeroish(b)),
    "logical_or": lambda a, b: torch.logical_or(_zeroish(a), b.real),
    "logical_xor": lambda a, b: torch.logical_xor(_zeroish(a), _zeroish(b)),
    "any": lambda a, b: torch.stack([_zeroish(a).any(), (_zeroish(a) * 0).any()]),
    "any_dim": lambda a, b: _zeroish(a).any(1),
    "all": lambda a, b: torch.stack([_zeroish(a).all(), (a + 1j).all()]),
    "all_dim": lambda a, b: _zeroish(a).all(0),
    # reductions
    "sum": lambda a, b: a.sum(),
    "sum_dim": lambda a, b: a.sum(1, keepdim=True),
    "mean": lambda a, b: a.mean(),
    "mean_dim": lambda a, b: a.mean(0),
    "prod": lambda a, b: a.prod(),
    "prod_dim": lambda a, b: a.prod(1),
    "cumsum": lambda a, b: a.cumsum(1),
    "cumprod": lambda a, b: a.cumprod(0),
    "var": lambda a, b: a.var(),
    "var_dim": lambda a, b: a.var(1, keepdim=True),
    "var_correction0": lambda a, b: torch.var(a, 0, correction=0),
    "std": lambda a, b: a.std(0),
    "var_mean": lambda a, b: torch.var_mean(a, 1),
    "std_mean": lambda a, b: torch.std_mean(a, None, correction=2),
    "vector_norm": lambda a, b: torch.linalg.vector_norm(a),
    "vector_norm_1": lambda a, b: torch.linalg.vector_norm(a, 1, dim=1),
    "vector_norm_3": lambda a, b: torch.linalg.vector_norm(a, 3, dim=0, keepdim=True),
    "vector_norm_inf": lambda a, b: torch.linalg.vector_norm(a, float("inf")),
    "vector_norm_ninf": lambda a, b: torch.linalg.vector_norm(a, float("-inf"), dim=1),
    "vector_norm_0": lambda a, b: torch.linalg.vector_norm(a, 0),
    "linalg_norm": lambda a, b: torch.linalg.norm(a),
    "matrix_norm_fro": lambda a, b: torch.linalg.matrix_norm(a),
    "norm_p": lambda a, b: torch.norm(a, p=1.5, dim=1),
    "trace": lambda a, b: torch.trace(a[:, :3]),
    # products
    "dot": lambda a, b: torch.dot(a[0], b[0]),
    "linalg_cross": lambda a, b: torch.linalg.cross(a[:, :3], b[:, 1:]),
    "vdot": lambda a, b: torch.vdot(a[0], b[0]),
    "mv": lambda a, b: torch.mv(a, b[0]),
    "mm": lambda a, b: torch.mm(a, b.T),
    "matmul_mH": lambda a, b: a @ b.mH,
    "bmm": lambda a, b: torch.bmm(a[None], b.T[None]),
    "addmm": lambda a, b: torch.addmm(a[:, :3], a, b.T[:, :3], beta=0.5, alpha=2 - 1j),
    "addmv": lambda a, b: torch.addmv(a[:, 0], a, b[1]),
    "baddbmm": lambda a, b: torch.baddbmm(a[None, :, :3], a[None], b.T[None, :, :3]),
    "addbmm": lambda a, b: torch.addbmm(a[:, :3], torch.stack([a, b]), torch.stack([b.T, a.T])[:, :, :3]),
    "addr": lambda a, b: torch.addr(a, a[:, 0], b[0]),
    # data movement
    "transpose": lambda a, b: a.t().contiguous(),
    "permute": lambda a, b: a[None].permute(2, 0, 1).contiguous(),
    "reshape": lambda a, b: a.reshape(2, 6) + 0,
    "slice": lambda a, b: a[:, 1:3] + 0,
    "expand": lambda a, b: a[:1].expand(3, 4) + 0,
    "cat": lambda a, b: torch.cat([a, b], 1),
    "stack": lambda a, b: torch.stack([a, b]),
    "index_select": lambda a, b: a.index_select(1, _on(IDX, a)),
    "gather": lambda a, b: a.gather(1, _on(GIDX, a)),
    "index": lambda a, b: a[_on(IDX[:3], a)],
    "index_put": lambda a, b: a.index_put((_on(IDX[:3], a),), b[0]),
    "index_put_accumulate": lambda a, b: a.index_put((_on(IDX[:3], a),), b[0], accumulate=True),
    "scatter": lambda a, b: a.scatter(1, _on(GIDX, a), b),
    "scatter_add": lambda a, b: a.scatter_add(1, _on(GIDX, a), b),
    "scatter_reduce_add": lambda a, b: a.scatter(1, _on(GIDX, a), b, reduce="add"),
    "scatter_reduce_multiply": lambda a, b: a.scatter(1, _on(GIDX, a), b, reduce="multiply"),
    "scatter_value": lambda a, b: a.scatter(1, _on(GIDX, a), 2 - 1j),
    "masked_select": lambda a, b: torch.masked_select(a, _on(MASK, a)),
    "bool_mask_index": lambda a, b: a[_on(MASK, a)],
    "equal": lambda a, b: torch.tensor([torch.equal(a, a), torch.equal(a, b),
                                        torch.equal(a, a.conj())], device=a.device),
    "index_add": lambda a, b: a.index_add(0, _on(IDX[:3], a), b, alpha=1 - 1j),
    "index_copy": lambda a, b: a.index_copy(0, _on(torch.tensor([2, 0, 1]), a), b),
    "index_fill": lambda a, b: a.index_fill(1, _on(IDX[:2], a), 2 + 3j),
    "masked_scatter": lambda a, b: a.masked_scatter(_on(MASK, a), b * 2),
    "take": lambda a, b: a.take(_on(torch.tensor([0, 5, 11, 5]), a)),
    "put": lambda a, b: a.put(_on(torch.tensor([0, 5, 5]), a), b[0, :3], accumulate=True),
    "flip": lambda a, b: a.flip(0),
    "roll": lambda a, b: a.roll(1, 1),
    "repeat": lambda a, b: a.repeat(2, 1),
    "tril": lambda a, b: a.tril(),
    "triu": lambda a, b: a.triu(1),
    "pad": lambda a, b: torch.nn.functional.pad(a, (1, 2)),
    "where": lambda a, b: torch.where(_on(MASK, a), a, b),
    "where_scalar": lambda a, b: torch.where(_on(MASK, a), a, 1 - 1j),
    "masked_fill_complex": lambda a, b: a.masked_fill(_on(MASK, a), 1 + 2j),
    "masked_fill_real": lambda a, b: a.masked_fill(_on(MASK, a), 3.0),
    "clone": lambda a, b: a.clone(),
    "copy_": lambda a, b: torch.empty_like(a).copy_(b),
    "to_complex128": lambda a, b: a.to(torch.complex128),
    "to_complex64": lambda a, b: a.to(torch.complex64),
    "real_to_complex": lambda a, b: a.real.to(a.dtype),
    "int_to_complex": lambda a, b: (a.real * 10).to(torch.int64).to(a.dtype),
    "zeros_like": lambda a, b: torch.zeros_like(a),
    "ones_like": lambda a, b: torch.ones_like(a),
    "full_complex": lambda a, b: torch.full((2, 3), 1 + 2j, dtype=a.dtype, device=a.device),
    "view_as_real": lambda a, b: torch.view_as_real(a) * 2,
}


def _check(got, expected, tol):
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _check(g, e, tol)
        return
    assert got.device.type == DEV
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert_close(got.cpu(), expected, equal_nan=True, **tol)


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", list(OPS))
def test_op_matches_cpu_without_fallback(name, dtype):
    fn = OPS[name]
    a, b = _crandn(3, 4, dtype=dtype, seed=1), _crandn(3, 4, dtype=dtype, seed=2)
    expected = fn(a, b)
    ta, tb = a.to(DEV), b.to(DEV)
    before = fallback_counts()
    got = fn(ta, tb)
    assert new_fallbacks(before) == {}
    _check(got, expected, TOL[dtype])


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
def test_in_place_and_out_variants(dtype):
    a, b = _crandn(3, 4, dtype=dtype, seed=3), _crandn(3, 4, dtype=dtype, seed=4)
    ta, tb = a.to(DEV), b.to(DEV)
    before = fallback_counts()
    ta.mul_(0.5j).add_(tb, alpha=2).pow_(2).div_(1 - 1j)
    a.mul_(0.5j).add_(b, alpha=2).pow_(2).div_(1 - 1j)
    out = torch.empty(3, 4, dtype=dtype, device=DEV)
    torch.exp(tb, out=out)
    assert new_fallbacks(before) == {}
    assert_close(ta.cpu(), a, **TOL[dtype])
    assert_close(out.cpu(), b.exp(), **TOL[dtype])


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("kwargs", [{}, dict(nan=1.5, posinf=7.0, neginf=-8.0)])
def test_nan_to_num_replaces_each_part(kwargs, dtype):
    x = _special(dtype)
    before = fallback_counts()
    got = torch.nan_to_num(x.to(DEV), **kwargs)
    assert new_fallbacks(before) == {}
    assert torch.equal(torch.view_as_real(got.cpu()),
                       torch.view_as_real(torch.nan_to_num(x, **kwargs)))


def _special(dtype):
    inf, nan = float("inf"), float("nan")
    vals = [complex(nan, 1), complex(1, nan), complex(0, nan), complex(inf, 0), complex(1, -inf),
            complex(-inf, nan), complex(0, 0), complex(-0.0, -0.0), complex(2, -3),
            complex(1e-30, 1e30)]
    return torch.tensor(vals, dtype=dtype)


def _hypot(z: complex) -> float:
    return math.hypot(z.real, z.imag)  # C99 hypot: inf when either part is inf, even with a NaN


def _sgn(z: complex) -> complex:
    # torch.sgn's documented formula z / |z| (0 at 0), dividing each part by the real |z|.
    h = _hypot(z)
    return 0j if h == 0 else complex(z.real / h, z.imag / h)


# The oracle for special values: each op's documented formula evaluated element by element in
# Python's float64 (IEEE arithmetic, C99 hypot/atan2), then rounded to the test's dtype. CPU
# PyTorch is no oracle here: its vectorised complex kernels depend on the instruction set
# (sgn(inf+0j) is nan+0j with AVX2 kernels and nan+nanj with the scalar or AVX-512 ones).
SPECIAL_ORACLES = {
    "isnan": lambda zs: [math.isnan(z.real) or math.isnan(z.imag) for z in zs],
    "isinf": lambda zs: [math.isinf(z.real) or math.isinf(z.imag) for z in zs],
    "isfinite": lambda zs: [math.isfinite(z.real) and math.isfinite(z.imag) for z in zs],
    "abs": lambda zs: [_hypot(z) for z in zs],
    "sgn": lambda zs: [_sgn(z) for z in zs],
    "eq": lambda zs: [z.real == w.real and z.imag == w.imag for z, w in zip(zs, zs[::-1])],
    "ne": lambda zs: [not (z.real == z.real and z.imag == z.imag) for z in zs],
    "angle": lambda zs: [math.atan2(z.imag, z.real) for z in zs],
    "neg": lambda zs: [complex(-z.real, -z.imag) for z in zs],
    "conj": lambda zs: [complex(z.real, -z.imag) for z in zs],
    "where": lambda zs: [z if z.real > 0 else w for z, w in zip(zs, zs[::-1])],
    "cat": lambda zs: zs + zs[::-1],
    "flip": lambda zs: zs[::-1],
    "vector_norm": lambda zs: [_hypot(z) for z in zs],
    "sum": lambda zs: [complex(a.real + b.real, a.imag + b.imag) for a, b in zip(zs[::2], zs[1::2])],
}


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", list(SPECIAL_ORACLES))
def test_special_values(name, dtype):
    x = _special(dtype)
    fns = {
        "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
        "abs": torch.abs, "sgn": torch.sgn, "eq": lambda z: z == z.flip(0),
        "ne": lambda z: z != z, "angle": torch.angle, "neg": torch.neg,
        "conj": lambda z: torch.conj_physical(z),
        "where": lambda z: torch.where(z.real > 0, z, z.flip(0)),
        "cat": lambda z: torch.cat([z, z.flip(0)]), "flip": lambda z: z.flip(0),
        "vector_norm": lambda z: torch.stack([torch.linalg.vector_norm(z[i:i + 1])
                                              for i in range(len(z))]),
        "sum": lambda z: z.reshape(5, 2).sum(1),
    }
    fn = fns[name]
    before = fallback_counts()
    got = fn(x.to(DEV))
    assert new_fallbacks(before) == {}
    # The CPU gives the result dtype; the values come from the IEEE oracle.
    cpu_dtype = fn(x).dtype
    assert got.dtype == cpu_dtype
    expected = torch.tensor(SPECIAL_ORACLES[name](x.tolist()), dtype=cpu_dtype)
    g, e = got.cpu(), expected
    if g.is_complex():
        g, e = torch.view_as_real(g), torch.view_as_real(e)
    # NaN where the oracle has NaN, the same infinities, and close values elsewhere.
    assert_close(g, e, equal_nan=True, **TOL[dtype])


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("exponent", [0, 1, 2, 3, -2, 0.5, -0.5, -1, 2 + 0j, 2.5])
def test_pow_scalar_special_exponents(exponent, dtype):
    # CPU computes these exponents as fill/copy/products/sqrt/rsqrt/reciprocal, which differ
    # from exp(y log x) at infinities: (1 + inf j) ** 2 is -inf + inf j.
    inf = float("inf")
    pts = [complex(-2, 0.0), complex(-2, -0.0), complex(0.5, -1.5), complex(3, 4)]
    if exponent in (0, 1, 2, 3, 0.5, -1, 2 + 0j):
        # elsewhere CPU's results at infinities are NaN patterns of its own division and pow
        pts += [complex(1, inf), complex(inf, 0)]
    z = torch.tensor(pts, dtype=dtype)
    expected = z ** exponent
    before = fallback_counts()
    got = (z.to(DEV) ** exponent).cpu()
    assert new_fallbacks(before) == {}
    assert_close(torch.view_as_real(got), torch.view_as_real(expected), equal_nan=True,
                 **TOL[dtype])


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
def test_pow_zero_base(dtype):
    # CPU's std::pow: 0 ** y is 0 for Re(y) > 0, inf + NaN j for Re(y) < 0, NaN otherwise
    # (0 ** 0 too); XLA's own power said 1 for 0 ** 0 and NaN for 0 ** (1 + 1j).
    exps = [0j, 2 + 0j, 1 + 1j, -1 + 0j, 0.5 + 0j, 1j, -2.5 + 1j]
    z = torch.tensor([0j] * len(exps) + [complex(-0.0, 0)] * len(exps), dtype=dtype)
    e = torch.tensor(exps * 2, dtype=dtype)
    for fn in (lambda x, y: torch.pow(x, y), lambda x, y: 0.0 ** y,
               lambda x, y: x ** (1 + 1j), lambda x, y: x ** (-2.5 + 1j)):
        expected = torch.view_as_real(fn(z, e))
        got = torch.view_as_real(fn(z.to(DEV), e.to(DEV)).cpu())
        assert_close(got, expected, equal_nan=True, **TOL[dtype])


# Every pair of bases and exponents whose parts are 0, -0, +-1, 2.5, -0.5, +-inf or NaN. The
# CPU's complex pow is glibc's cpow on Linux (libstdc++'s std::pow calls it): cexp(y * clog(x))
# with C99 Annex G's product, whose values at these points are glibc's own (macOS's libc++ and
# MSVC compute pow themselves and differ there; this reference is glibc's). tpu builds the same
# three steps (lowering/complex_pow.cpp). Left out on purpose, as documented in docs/what-runs.md
# (numerics): results below the smallest normal (XLA flushes subnormals to zero:
# (1e300j) ** -1 is 6e-317 - 1e-300j on the CPU, -1e-300j on tpu) and huge angles (the sine and
# cosine of |Im(y log x)| ~ 1e30, whose sign glibc's exact argument reduction gets and XLA's
# does not: (1 - 0.5j) ** 1e30j is -inf + inf j on the CPU, -inf - inf j on tpu).
SPECIAL_PARTS = [0.0, -0.0, 1.0, -1.0, 2.5, -0.5, math.inf, -math.inf, math.nan]
SPECIAL_POINTS = [complex(a, b) for a in SPECIAL_PARTS for b in SPECIAL_PARTS]


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
def test_pow_special_values_match_cpu(dtype):
    n = len(SPECIAL_POINTS)
    x = torch.tensor(SPECIAL_POINTS, dtype=dtype).repeat_interleave(n)
    y = torch.tensor(SPECIAL_POINTS, dtype=dtype).repeat(n)
    z = torch.tensor(SPECIAL_POINTS, dtype=dtype)
    before = fallback_counts()
    cases = {
        "tensor ** tensor": (torch.pow(x, y), torch.pow(x.to(DEV), y.to(DEV))),
        # the scalar forms reach the same power (exponents the CPU special-cases have their
        # own test above)
        "tensor ** (1 + 1j)": (z ** (1 + 1j), z.to(DEV) ** (1 + 1j)),
        "tensor ** 2.5": (z ** 2.5, z.to(DEV) ** 2.5),
        "(-1.5) ** tensor": ((-1.5) ** z, (-1.5) ** z.to(DEV)),
        "0.0 ** tensor": (0.0 ** z, 0.0 ** z.to(DEV)),
    }
    assert new_fallbacks(before) == {}
    for name, (want, got) in cases.items():
        # NaN where the CPU has NaN (either sign), the same infinities, close values elsewhere.
        assert_close(torch.view_as_real(got.cpu()), torch.view_as_real(want), equal_nan=True,
                     msg=name, **TOL[dtype])


BRANCH_POINTS = [complex(-2, 0.0), complex(-2, -0.0), complex(2, -0.0), complex(0.5, -0.0),
                 complex(-0.0, 2), complex(0.0, 2), complex(-0.0, -3), complex(-0.0, 0.5),
                 complex(1e30, -0.0), complex(-0.0, 1e30), complex(-3, -0.0)]


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", ["sqrt", "rsqrt", "log", "log1p", "log2", "log10", "asin", "acos",
                                  "atan", "asinh", "acosh", "atanh", "pow_half"])
def test_branch_cuts_follow_signed_zero(name, dtype):
    # On a branch cut the sign of a zero part picks the side: CPU's sqrt(-2 - 0j) is -1.414j.
    fn = (lambda z: z ** 0.5) if name == "pow_half" else getattr(torch, name)
    z = torch.tensor(BRANCH_POINTS, dtype=dtype)
    got = fn(z.to(DEV)).cpu()
    assert_close(got, fn(z), **TOL[dtype])


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", ["sin", "cos", "sinh", "cosh", "tan", "tanh", "exp", "expm1",
                                  "log1p", "asin", "atan", "asinh", "atanh"])
def test_small_and_large_arguments(name, dtype):
    # sin(1e-8 + 1e-8j) keeps its imaginary part (XLA's own complex sine cancels it to 0), and
    # cos(1e-8 + 100j) stays finite where cosh(100) alone overflows in f32.
    tiny = [complex(1e-8, 1e-8), complex(-1e-8, 1e-4), complex(1e-4, -1e-8), complex(3e-6, 0),
            complex(0, -2e-7)]
    big = [complex(1e-8, 100), complex(0.5, -60), complex(60, 0.5), complex(-100, 1e-3)]
    pts = tiny + (big if name in ("sin", "cos", "sinh", "cosh") else [])
    z = torch.tensor(pts, dtype=dtype)
    fn = getattr(torch, name)
    expected = fn(z)
    got = fn(z.to(DEV)).cpu()
    # part by part: sin(1e-8 + 100j) has an infinite imaginary part in complex64
    assert_close(torch.view_as_real(got), torch.view_as_real(expected), **TOL[dtype])


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
def test_complex_to_real_copy_takes_real_part(dtype):
    a = _crandn(5, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Casting complex values to real discards..."
        expected = a.to(REAL[dtype])
        got = a.to(DEV).to(REAL[dtype]).cpu()
    assert torch.equal(got, expected)


# ---- the guard: complex operands of ops without a complex lowering ----

def test_op_without_complex_lowering_falls_back_and_is_correct():
    a, b = _crandn(3, 4, seed=5), _crandn(3, 4, seed=6)
    before = fallback_counts()
    got = torch.exp2(a.to(DEV))
    assert "aten::exp2" in new_fallbacks(before)
    assert_close(got.cpu(), torch.exp2(a), rtol=1e-5, atol=1e-6)
    before = fallback_counts()
    got = torch.sinc(b.to(DEV))
    assert "aten::sinc" in new_fallbacks(before)
    assert_close(got.cpu(), torch.sinc(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,fn", [
    ("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("div_scalar_trunc", lambda a, b: torch.div(a, 2.0, rounding_mode="trunc")),
    ("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("lt", lambda a, b: a < b),
    ("isposinf", lambda a, b: torch.isposinf(a)),
    ("max", lambda a, b: a.max()),
    ("vector_norm_real_dtype", lambda a, b: torch.linalg.vector_norm(a, dtype=torch.float32)),
])
def test_complex_inputs_cpu_rejects_are_errors(name, fn):
    # What CPU refuses for complex values raises on tpu too, never a silently computed result.
    a, b = _crandn(4, seed=13), _crandn(4, seed=14)
    with pytest.raises((RuntimeError, NotImplementedError)):
        fn(a, b)
    with pytest.raises((RuntimeError, NotImplementedError)):
        fn(a.to(DEV), b.to(DEV)).cpu()


def test_tpu_helper_without_complex_lowering_is_a_clear_error():
    # unique's count program is a torchtpu:: op with no CPU kernel to fall back to; CPU has no
    # complex unique either.
    with pytest.raises(NotImplementedError, match="unique"):
        torch.unique(_crandn(5).to(DEV))


def test_complex_half_is_a_clear_error():
    with pytest.raises(NotImplementedError, match="ComplexHalf"):
        torch.zeros(3, dtype=torch.complex32, device=DEV)
    t = _crandn(3).to(DEV)
    with pytest.raises(NotImplementedError, match="ComplexHalf"):
        t.to(torch.complex32)
    h = torch.randn(3, 2).half().to(DEV)
    with pytest.raises(NotImplementedError, match="ComplexHalf"):
        h * 1j
    # view_as_complex of half data is a view (metadata only); the first use of it says why.
    with pytest.raises(NotImplementedError, match="ComplexHalf"):
        torch.view_as_complex(h).abs()
    # the process stays usable
    assert_close((t * 2).cpu(), t.cpu() * 2)


# ---- torch.compile with Python complex constants ----

COMPILED = {
    "mul_j": lambda z: z * 0.5j,
    "add_complex": lambda z: z + (1 + 2j),
    "sub_div": lambda z: (z - 2j) / (1 - 1j),
    "real_times_j": lambda z: z.real * 0.5j + z,
    "pow_complex": lambda z: z ** (2 + 0.5j),
    "eq_complex": lambda z: (z * 0 + (1 + 2j)) == (1 + 2j),
    "abs_after_j": lambda z: (z * 1j + 0.25).abs() * 2,
    "exp_sum": lambda z: (z * 1j).exp().sum(0),
    "matmul_mH": lambda z: z @ z.mH,  # a conjugate view (_conj) in the graph
    "resolve_conj": lambda z: torch.resolve_conj(z.conj()) * 2 + z.conj().imag,
    "neg_view": lambda z: torch._neg_view(z * 2).resolve_neg() + 1j,
}


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", list(COMPILED))
def test_compile_complex_constants(name, dtype, fresh_dynamo):
    fn = COMPILED[name]
    x = _crandn(3, 4, dtype=dtype, seed=7)
    expected = fn(x)
    eager = fn(x.to(DEV))
    before = set(tpu_dynamo.graph_metrics())
    fallbacks = fallback_counts()
    got = torch.compile(fn, backend="tpu")(x.to(DEV))
    graphs = {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in before}
    assert graphs and all("eager_reason" not in g for g in graphs.values()), graphs
    assert new_fallbacks(fallbacks) == {}
    _check(got, expected, TOL[dtype])
    _check(eager, expected, TOL[dtype])


def _views_pipeline(z):
    y = z.reshape(2, 6).permute(1, 0).t()[:, 1:5]  # (2, 4)
    y = y.unsqueeze(0).expand(3, 2, 4).flatten(0, 1).squeeze()  # (6, 4)
    d = torch.diagonal(y[:4])  # (4,)
    a, b = torch.split(y, [2, 4])
    u = torch.unbind(a, 0)[1]
    f = torch.full((4,), 1 - 2j, dtype=z.dtype, device=z.device) + torch.zeros_like(d)
    r = torch.view_as_real(y * 1j)  # (6, 4, 2)
    back = torch.view_as_complex(r.contiguous() * 2)
    w = y.clone()
    w[1:3] = w[1:3] * 0.5j  # slice_scatter
    w[0] = d  # select_scatter
    return d + u + f + b.sum(0) + back.sum(0) + z.real[0] + z.imag[1] * 1j + w.sum(0)


@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
def test_compile_complex_views_and_factories(dtype, fresh_dynamo):
    x = _crandn(3, 4, dtype=dtype, seed=10)
    before = set(tpu_dynamo.graph_metrics())
    got = torch.compile(_views_pipeline, backend="tpu")(x.to(DEV))
    graphs = {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in before}
    assert graphs and all("eager_reason" not in g for g in graphs.values()), graphs
    _check(got, _views_pipeline(x), TOL[dtype])


def test_compile_real_input_complex_constant(fresh_dynamo):
    r = torch.randn(5)
    fn = lambda v: (v * (0.5 - 1.5j)).sqrt() + v  # noqa: E731
    got = torch.compile(fn, backend="tpu")(r.to(DEV))
    _check(got, fn(r), TOL[torch.complex64])


def test_compile_graph_with_unlowered_complex_op_declines(fresh_dynamo):
    # exp2 is not on the complex allowlist: the graph runs eagerly (exp2 on the CPU fallback)
    # instead of lowering it with a real-only formula.
    a, b = _crandn(4, seed=8), _crandn(4, seed=9)
    fn = lambda x, y: torch.exp2(x * 1j) + y  # noqa: E731
    before = set(tpu_dynamo.graph_metrics())
    got = torch.compile(fn, backend="tpu")(a.to(DEV), b.to(DEV))
    graphs = {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in before}
    assert any("eager_reason" in g for g in graphs.values()), graphs
    assert_close(got.cpu(), fn(a, b), rtol=1e-5, atol=1e-6)


# ---- autograd through complex ops (the backward graphs use the same native lowerings) ----

GRADS = {
    "abs_sum": lambda a, b: a.abs().sum(),
    "mm_abs": lambda a, b: (a @ b).abs().sum(),
    "exp_real": lambda a, b: a.exp().real.sum(),
    "mul_conj": lambda a, b: (a * a.conj()).real.sum(),
    "sin_imag": lambda a, b: a.sin().imag.sum(),
    "var": lambda a, b: a.var(),
    "vector_norm": lambda a, b: torch.linalg.vector_norm(a),
    "angle": lambda a, b: a.angle().sum(),
    "pow": lambda a, b: (a ** 2).abs().sum(),
    "div": lambda a, b: (a / (a + 3)).real.sum(),
    "fft": lambda a, b: torch.fft.fft(a).abs().sum(),
    "sqrt_log": lambda a, b: (a.sqrt().real + a.log().imag).sum(),
}


@pytest.mark.parametrize("name", list(GRADS))
def test_gradients_match_cpu(name):
    fn = GRADS[name]
    x, w = _crandn(3, 4, seed=11), _crandn(4, 2, seed=12)
    a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
    fn(a, b).backward()
    ta, tb = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    before = fallback_counts()
    fn(ta, tb).backward()
    assert new_fallbacks(before) == {}
    assert_close(ta.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
    if b.grad is not None:
        assert_close(tb.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,fn", [
    ("c64_times_c128", lambda a, b, r: a * b.to(torch.complex128)),
    ("c64_plus_f64", lambda a, b, r: a + r.double()),
    ("f32_div_c64", lambda a, b, r: r / a),
    ("c128_eq_c64", lambda a, b, r: a.to(torch.complex128) == a),
    ("where_mixed", lambda a, b, r: torch.where(r > 0, a, r.double())),
    ("cat_mixed", lambda a, b, r: torch.cat([a, b.to(torch.complex128)])),
    ("mm_c64_f32", lambda a, b, r: a @ r.T.to(torch.complex64)),
])
def test_mixed_precision_promotion(name, fn):
    a, b = _crandn(3, 4, seed=15), _crandn(3, 4, seed=16)
    r = torch.randn(3, 4, generator=torch.Generator().manual_seed(17))
    expected = fn(a, b, r)
    before = fallback_counts()
    got = fn(a.to(DEV), b.to(DEV), r.to(DEV))
    assert new_fallbacks(before) == {}
    _check(got, expected, TOL[torch.complex64])


@pytest.mark.parametrize("name", ["mm_abs", "exp_real", "var", "fft", "vector_norm"])
def test_compiled_gradients_match_cpu(name, fresh_dynamo):
    # forward and backward graphs of complex functions compile whole (no eager graph, no
    # fallback) and give CPU's gradients
    fn = GRADS[name]
    x, w = _crandn(3, 4, seed=18), _crandn(4, 2, seed=19)
    a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
    fn(a, b).backward()
    ta, tb = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    before = set(tpu_dynamo.graph_metrics())
    fallbacks = fallback_counts()
    torch.compile(fn, backend="tpu")(ta, tb).backward()
    graphs = {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in before}
    assert graphs and all("eager_reason" not in g for g in graphs.values()), graphs
    assert new_fallbacks(fallbacks) == {}
    assert_close(ta.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
    if b.grad is not None:
        assert_close(tb.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)


# ---- tanh/sigmoid backward: grad * conj(f'(x)), natively ----

@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name,fn", [
    ("tanh", lambda z: torch.tanh(z)),
    ("sigmoid", lambda z: torch.sigmoid(z)),
    ("tanh_abs", lambda z: torch.tanh(z).abs().sum()),
    ("sigmoid_imag", lambda z: torch.sigmoid(z).imag.sum()),
])
def test_tanh_sigmoid_gradients_match_cpu(name, fn, dtype):
    x = _crandn(3, 4, dtype=dtype, seed=21)
    g = _crandn(3, 4, dtype=dtype, seed=22)
    a = x.clone().requires_grad_()
    out = fn(a)
    out.backward(g if out.dim() else None)
    t = x.to(DEV).requires_grad_()
    before = fallback_counts()
    got = fn(t)
    got.backward(g.to(DEV) if got.dim() else None)
    assert new_fallbacks(before) == {}
    assert_close(got.detach().cpu(), out.detach(), **TOL[dtype])
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.complex64 else TOL[dtype]
    assert_close(t.grad.cpu(), a.grad, **tol)


@pytest.mark.parametrize("f", [torch.tanh, torch.sigmoid])
def test_tanh_sigmoid_compiled_gradients_match_cpu(f, fresh_dynamo):
    # the backward graph (tanh_backward/sigmoid_backward decomposed to _conj_physical) compiles
    def fn(z):
        return f(z).abs().sum()

    x = _crandn(3, 4, seed=27)
    a = x.clone().requires_grad_()
    fn(a).backward()
    t = x.to(DEV).requires_grad_()
    before = set(tpu_dynamo.graph_metrics())
    fallbacks = fallback_counts()
    torch.compile(fn, backend="tpu")(t).backward()
    graphs = {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in before}
    assert graphs and all("eager_reason" not in g for g in graphs.values()), graphs
    assert new_fallbacks(fallbacks) == {}
    assert_close(t.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", [torch.ops.aten.tanh_backward, torch.ops.aten.sigmoid_backward])
def test_tanh_sigmoid_backward_ops_conjugate(op):
    g, y = _crandn(3, 4, seed=23), _crandn(3, 4, seed=24)
    before = fallback_counts()
    got = op(g.to(DEV), y.to(DEV))
    assert new_fallbacks(before) == {}
    assert_close(got.cpu(), op(g, y), **TOL[torch.complex64])


# ---- torch.abs(z, out=t): t may have any dtype the real result casts to, as on CPU ----

@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64, torch.float16,
                                       torch.complex64])
def test_abs_out_complex_input(out_dtype):
    z = _crandn(3, 4, seed=25)
    expected = torch.abs(z, out=torch.empty(0, dtype=out_dtype))
    out = torch.empty(0, dtype=out_dtype, device=DEV)
    before = fallback_counts()
    r = torch.abs(z.to(DEV), out=out)
    assert new_fallbacks(before) == {}
    assert r is out and out.dtype == out_dtype and out.shape == expected.shape
    assert_close(out.cpu(), expected, rtol=1e-3 if out_dtype == torch.float16 else 1e-5,
                 atol=1e-6)


def test_abs_out_complex_input_uncastable_raises_like_cpu():
    z = _crandn(3, 4, seed=26)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Int"):
        torch.abs(z, out=torch.empty(3, 4, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Int"):
        torch.abs(z.to(DEV), out=torch.empty(3, 4, dtype=torch.int32, device=DEV))
    # a complex out= must be z's own dtype
    with pytest.raises(RuntimeError, match="Found dtype ComplexDouble but expected ComplexFloat"):
        torch.abs(z, out=torch.empty(3, 4, dtype=torch.complex128))
    with pytest.raises(RuntimeError, match="Found dtype ComplexDouble but expected ComplexFloat"):
        torch.abs(z.to(DEV), out=torch.empty(3, 4, dtype=torch.complex128, device=DEV))


# ---- complex products holding an infinity (issue 32) ----
# The oracle is the textbook sum over k of (a + bi)(c + di) = (ac - bd) + (ad + bc)i in float64,
# evaluated part by part: which outputs are inf or NaN, the signs of the infinities and the finite
# values. The CPU's bmm, dot and batched matmul loops compute exactly that (bmm of
# [[inf, 1+1j]] and [[1], [1]] is inf+nanj); its mm/mv/addmm go to MKL's cgemm, which makes
# nan+nanj of such rows (so does XLA's own complex dot, which tpu used to emit): host-library
# behaviour, not an oracle.

def _textbook_product(a, b):
    """sum_k a[..., i, k] * b[..., k, j] as (re, im) float64 tensors, per the textbook formula."""
    ar, ai = a.real.double().unsqueeze(-1), a.imag.double().unsqueeze(-1)
    br, bi = b.real.double().unsqueeze(-3), b.imag.double().unsqueeze(-3)
    return (ar * br - ai * bi).sum(-2), (ar * bi + ai * br).sum(-2)


def _assert_parts(got, re, im):
    g = got.cpu()
    for part, want in ((g.real.double(), re), (g.imag.double(), im)):
        assert torch.equal(part.isnan(), want.isnan()), (part, want)
        assert torch.equal(part.isinf(), want.isinf()), (part, want)
        assert torch.equal(part[part.isinf()], want[want.isinf()])
        fin = want.isfinite()
        assert_close(part[fin], want[fin], rtol=1e-5, atol=1e-5)


def _assert_matches_textbook(got, a, b):
    _assert_parts(got, *_textbook_product(a, b))


def _inf_operands(dtype, batch=(1,)):
    inf = math.inf
    a = torch.tensor([[complex(inf, 0), 1 + 1j], [2, 1j]], dtype=dtype).expand(*batch, 2, 2)
    b = torch.tensor([[1, 0], [1, 2]], dtype=dtype).expand(*batch, 2, 2)
    # Larger operands with infinities and NaNs in either part, scattered.
    g = torch.Generator().manual_seed(3)
    big_a = torch.randn(*batch, 5, 7, dtype=dtype, generator=g)
    big_b = torch.randn(*batch, 7, 4, dtype=dtype, generator=g)
    big_a[..., 1, 2] = complex(inf, 1)
    big_a[..., 3, 0] = complex(0.5, -inf)
    big_b[..., 4, 1] = complex(math.nan, 0)
    big_b[..., 0, 3] = complex(-inf, 0)
    return [(a.contiguous(), b.contiguous()), (big_a.contiguous(), big_b.contiguous())]


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
def test_complex_products_with_infinities_follow_the_textbook_sum(dtype):
    for a, b in _inf_operands(dtype, batch=(3,)):
        ta, tb = a.to(DEV), b.to(DEV)
        got = torch.bmm(ta, tb)
        _assert_matches_textbook(got, a, b)
        # The CPU's bmm and batched matmul are the textbook loop: equal to it, NaNs included.
        assert_close(got.cpu(), torch.bmm(a, b), equal_nan=True, **TOL[dtype])
        assert_close(torch.matmul(ta, tb).cpu(), torch.matmul(a, b), equal_nan=True, **TOL[dtype])
        out = torch.empty(0, dtype=dtype, device=DEV)
        torch.linalg.matmul(ta, tb, out=out)
        assert_close(out.cpu(), torch.linalg.matmul(a, b), equal_nan=True, **TOL[dtype])
        for i in range(a.shape[0]):
            _assert_matches_textbook(torch.mm(ta[i], tb[i]), a[i], b[i])
            _assert_matches_textbook(torch.mv(ta[i], tb[i, :, 0]).unsqueeze(-1), a[i],
                                     b[i, :, :1])
        _assert_matches_textbook(torch.dot(ta[0, 0], tb[0, :, 0]).reshape(1, 1), a[0, :1],
                                 b[0, :, :1])
        # beta * self + alpha * product with the default alpha = beta = 1: the product itself
        # (1 * z is z). The CPU's small-size loop multiplies by alpha as a complex number anyway,
        # which makes both parts NaN once either is not finite, and its BLAS path for larger
        # sizes gives yet other NaNs: no oracle.
        s = torch.zeros(a.shape[0], a.shape[1], b.shape[2], dtype=dtype)
        _assert_matches_textbook(torch.baddbmm(s.to(DEV), ta, tb), a, b)
        o = torch.empty(0, dtype=dtype, device=DEV)
        _assert_matches_textbook(torch.baddbmm(s.to(DEV), ta, tb, out=o), a, b)
        _assert_matches_textbook(torch.addbmm(s[0].to(DEV), ta, tb),
                                 a.transpose(0, 1).reshape(a.shape[1], -1),
                                 b.reshape(-1, b.shape[2]))
    # The 2x2 case: the CPU's bmm and batched matmul loops are the textbook formula.
    a, b = _inf_operands(dtype)[0]
    for fn in (torch.bmm, torch.matmul):
        assert_close(fn(a.to(DEV), b.to(DEV)).cpu(), fn(a, b), equal_nan=True, **TOL[dtype])
    assert torch.bmm(a.to(DEV), b.to(DEV))[0, 0, 0].item().real == math.inf


# ---- arctan / arctanh at special values (issue 32) ----
# The oracle is C99 Annex G, as Python's cmath implements it (glibc's catan/catanh, which the
# CPU's std::atan/std::atanh call, follow the same table). Where the standard leaves the sign of
# a zero unspecified (catanh(NaN + i inf) = +-0 + i pi/2, catan(+-inf + i NaN) = +-pi/2 +- 0i),
# either sign is accepted.

def _c99_parts(name, z):
    import cmath

    return getattr(cmath, name)(z)


def _same_part(got, want, unspecified_zero_sign):
    if math.isnan(want):
        return math.isnan(got)
    if want == 0 and got == 0:
        return unspecified_zero_sign or math.copysign(1, got) == math.copysign(1, want)
    if math.isinf(want):
        return got == want
    return abs(got - want) <= 2e-6 * max(1.0, abs(want))


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("dtype", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", ["atan", "atanh"])
def test_arctan_arctanh_special_values_follow_c99(name, dtype):
    inf, nan = math.inf, math.nan
    parts = [0.0, -0.0, 0.5, -2.0, 1.0, -1.0, 3.0, inf, -inf, nan]
    zs = [complex(a, b) for a in parts for b in parts]
    z = torch.tensor(zs, dtype=dtype)
    # (1 +- tiny i) and its kin lose their value to float32 underflow in XLA's formula; the
    # special values are what is checked here.
    results = {
        "fn": getattr(torch, name)(z.to(DEV)).cpu().tolist(),
        "inplace": getattr(z.to(DEV).clone(), name + "_")().cpu().tolist(),
        "out": getattr(torch, name)(z.to(DEV), out=torch.empty(0, dtype=dtype, device=DEV))
        .cpu().tolist(),
        "alias": getattr(torch, {"atan": "arctan", "atanh": "arctanh"}[name])(z.to(DEV))
        .cpu().tolist(),
    }
    for form, got in results.items():
        bad = []
        for zi, g in zip(z.tolist(), got):
            if name == "atanh" and zi.imag == 0 and abs(zi.real) == 1:
                want = complex(math.copysign(inf, zi.real), zi.imag)  # the pole: +-inf +- 0i
            elif name == "atan" and zi.real == 0 and abs(zi.imag) == 1:
                want = complex(zi.real, math.copysign(inf, zi.imag))
            else:
                want = _c99_parts(name, zi)
            nan_in = math.isnan(zi.real) or math.isnan(zi.imag)
            ok = (_same_part(g.real, want.real, nan_in and name == "atanh") and
                  _same_part(g.imag, want.imag, nan_in and name == "atan"))
            if not ok:
                bad.append((zi, g, want))
        assert not bad, (form, bad)
    # The case, and the CPU agrees with the standard there.
    w = getattr(torch, name)(torch.tensor([complex(nan, inf)], dtype=dtype))
    g = getattr(torch, name)(torch.tensor([complex(nan, inf)], dtype=dtype, device=DEV)).cpu()
    assert_close(torch.view_as_real(g), torch.view_as_real(w), equal_nan=True)
