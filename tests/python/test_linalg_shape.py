"""Matrix products, data-movement ops and out= factories on tpu against CPU PyTorch."""

import math

import pytest
import torch
import torch.nn.functional as F
import torchtpu  # noqa: F401  (registers the tpu device)
from torchtpu.testing.fallbacks import fallback_counts, make, new_fallbacks

DEV = "tpu"

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]
MATMUL_DTYPES = FLOATS + INTS

OWN_OPS = {
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "dot", "mv", "addmv", "cat", "stack", "clone",
    "fill", "zero", "flip", "roll", "tril", "triu", "repeat", "constant_pad_nd", "index_select",
    "gather", "arange", "linspace", "eye",
}


pytestmark = pytest.mark.usefixtures("no_own_fallback")  # conftest.py


def to_dev(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def compare(actual, expected, atol=None, rtol=None):
    assert actual.device.type == DEV
    a = actual.cpu()
    assert a.dtype == expected.dtype and a.shape == expected.shape, (
        a.dtype, a.shape, expected.dtype, expected.shape)
    if expected.dtype.is_floating_point:
        torch.testing.assert_close(a, expected, equal_nan=True, atol=atol, rtol=rtol)
    else:
        torch.testing.assert_close(a, expected, atol=0, rtol=0)


def check(fn, *inputs, atol=None, rtol=None):
    expected = fn(*inputs)
    actual = fn(*[to_dev(x) for x in inputs])
    compare(actual, expected, atol, rtol)
    return actual


def tol(dtype):
    if dtype == torch.bfloat16:
        return {"atol": 3e-2, "rtol": 2e-2}
    if dtype == torch.float16:
        return {"atol": 3e-3, "rtol": 3e-3}
    return {"atol": 1e-5, "rtol": 1.3e-6}


# ---- matrix products ----


@pytest.mark.parametrize("dtype", MATMUL_DTYPES)
def test_mm_bmm_dot_mv(dtype):
    a, b = make((3, 5), dtype), make((5, 4), dtype, seed=1)
    check(torch.mm, a, b, **tol(dtype))
    check(torch.bmm, make((2, 3, 5), dtype), make((2, 5, 4), dtype, seed=1), **tol(dtype))
    check(torch.dot, make((7,), dtype), make((7,), dtype, seed=1), **tol(dtype))
    check(torch.mv, a, make((5,), dtype, seed=2), **tol(dtype))


def test_integer_matmul_is_exact():
    big = torch.full((2, 3), 1 << 40, dtype=torch.int64)
    check(torch.mm, big, torch.ones(3, 2, dtype=torch.int64))
    # int32 wraps like CPU.
    check(torch.mm, torch.full((1, 2), 1 << 30, dtype=torch.int32),
          torch.full((2, 1), 3, dtype=torch.int32))


def test_half_matmul_accumulates_in_f32():
    # 1024 products of 1 accumulate to 1024 exactly only with a wide accumulator.
    a = torch.ones(2, 1024, dtype=torch.bfloat16)
    check(torch.mm, a, torch.ones(1024, 2, dtype=torch.bfloat16), atol=0, rtol=0)
    check(torch.dot, torch.full((4096,), 0.5, dtype=torch.float16),
          torch.ones(4096, dtype=torch.float16), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", MATMUL_DTYPES)
def test_addmm_family(dtype):
    is_int = not dtype.is_floating_point
    beta, alpha = (2, 3) if is_int else (0.5, -1.5)
    t = tol(dtype)
    check(lambda s, a, b: torch.addmm(s, a, b, beta=beta, alpha=alpha),
          make((3, 4), dtype), make((3, 5), dtype, 1), make((5, 4), dtype, 2), **t)
    check(lambda s, a, b: torch.addmm(s, a, b), make((4,), dtype), make((3, 5), dtype, 1),
          make((5, 4), dtype, 2), **t)
    check(lambda s, a, b: torch.baddbmm(s, a, b, beta=beta, alpha=alpha),
          make((2, 3, 4), dtype), make((2, 3, 5), dtype, 1), make((2, 5, 4), dtype, 2), **t)
    check(lambda s, a, b: torch.addbmm(s, a, b, beta=beta, alpha=alpha),
          make((3, 4), dtype), make((2, 3, 5), dtype, 1), make((2, 5, 4), dtype, 2), **t)
    check(lambda s, a, v: torch.addmv(s, a, v, beta=beta, alpha=alpha),
          make((3,), dtype), make((3, 5), dtype, 1), make((5,), dtype, 2), **t)


def test_addmm_beta_zero_ignores_nan():
    s = torch.full((2, 2), float("nan"))
    a, b = make((2, 3), torch.float32), make((3, 2), torch.float32, 1)
    check(lambda s, a, b: torch.addmm(s, a, b, beta=0), s, a, b)
    check(lambda s, a, b: torch.addmm(s, a, b, beta=0.0, alpha=2.0), s, a, b)


def test_matmul_linear_composites():
    check(torch.matmul, make((2, 3, 4), torch.float32), make((4, 5), torch.float32, 1))
    check(torch.matmul, make((4,), torch.float32), make((2, 4, 3), torch.float32, 1))
    check(lambda x, w, b: F.linear(x, w, b), make((2, 3, 4), torch.float32),
          make((5, 4), torch.float32, 1), make((5,), torch.float32, 2))
    check(torch.outer, make((3,), torch.float32), make((4,), torch.float32, 1))


def test_matmul_out_and_inplace():
    a, b = make((3, 5), torch.float32), make((5, 4), torch.float32, 1)
    out = torch.empty(3, 4, device=DEV)
    torch.mm(a.to(DEV), b.to(DEV), out=out)
    compare(out, a @ b)
    s = make((3, 4), torch.float32, 2)
    sd = s.to(DEV)
    sd.addmm_(a.to(DEV), b.to(DEV), alpha=0.5)
    compare(sd, s.addmm(a, b, alpha=0.5))


def test_empty_contraction():
    check(torch.mm, torch.zeros(3, 0), torch.zeros(0, 2))
    check(torch.mm, torch.zeros(0, 3), torch.zeros(3, 2))


def test_matmul_autograd():
    a, b = make((3, 5), torch.float32), make((5, 4), torch.float32, 1)
    grads = []
    for dev in ("cpu", DEV):
        ad, bd = a.to(dev).detach().requires_grad_(), b.to(dev).detach().requires_grad_()
        (ad @ bd).sum().backward()
        grads.append((ad.grad.cpu(), bd.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0])


# ---- cat / stack ----


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dtype, dim):
    xs = [make((2, 3), dtype), make((2, 3), dtype, 1)]
    if dim == 0:
        xs.append(make((4, 3), dtype, 2))
    else:
        xs.append(make((2, 1), dtype, 2))
    check(lambda *t: torch.cat(t, dim), *xs)


def test_cat_promotion_and_empties():
    check(lambda a, b: torch.cat([a, b]), make((2,), torch.int32), make((3,), torch.float32))
    check(lambda a, b: torch.cat([a, b], 1), make((2, 0), torch.float32), make((2, 3), torch.float32))
    # Legacy: a 1-D empty tensor is skipped whatever the other ranks.
    check(lambda a, b: torch.cat([a, b], 0), torch.zeros(0), make((2, 3), torch.float32))
    check(lambda a, b: torch.cat([a, b]), torch.zeros(0, 3), torch.zeros(0, 3))
    out = torch.empty(0, device=DEV)
    torch.cat([make((2,), torch.float32).to(DEV), make((1,), torch.float32).to(DEV)], out=out)
    compare(out, torch.cat([make((2,), torch.float32), make((1,), torch.float32)]))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack(dim):
    check(lambda a, b: torch.stack([a, b], dim), make((2, 3), torch.float32),
          make((2, 3), torch.float32, 1))
    check(lambda a, b: torch.stack([a, b], dim if dim != 1 else 0), make((), torch.int64),
          make((), torch.int64, 1))


# ---- copies and fills ----


@pytest.mark.parametrize("dtype", ALL)
def test_clone_fill_zero(dtype):
    x = make((3, 4), dtype)
    check(lambda t: t.clone(), x)
    check(lambda t: t[:, 1:3].clone(), x)
    check(lambda t: t.t().clone(memory_format=torch.contiguous_format), x)
    val = True if dtype == torch.bool else (2.5 if dtype.is_floating_point else 7)
    check(lambda t: t.clone().fill_(val), x)
    check(lambda t: torch.ops.aten.fill.Scalar(t, val), x)
    check(lambda t: t.clone().fill_(torch.tensor(val, dtype=dtype, device=t.device)), x)
    check(lambda t: t.clone().zero_(), x)


def test_fill_views():
    def fn(t):
        t = t.clone()
        t[1].fill_(3.0)
        t[:, 0].zero_()
        return t
    check(fn, make((3, 4), torch.float32))


# ---- reordering ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_flip_roll(dtype):
    x = make((3, 4, 2), dtype)
    for dims in [(0,), (-1,), (0, 2), ()]:
        check(lambda t: torch.flip(t, dims), x)
    check(lambda t: torch.roll(t, 1), x)
    check(lambda t: torch.roll(t, -5, 1), x)
    check(lambda t: torch.roll(t, (2, 7), (0, -1)), x)
    check(lambda t: torch.roll(t, 3, 0), torch.zeros(0, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
@pytest.mark.parametrize("diagonal", [0, 1, -1, 5, -5])
def test_tril_triu(dtype, diagonal):
    check(lambda t: torch.tril(t, diagonal), make((4, 5), dtype))
    check(lambda t: torch.triu(t, diagonal), make((2, 4, 3), dtype))
    x = make((4, 4), dtype)
    xd = x.to(DEV)
    xd.triu_(diagonal)
    compare(xd, x.triu(diagonal))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_repeat(dtype):
    x = make((2, 3), dtype)
    check(lambda t: t.repeat(2, 1), x)
    check(lambda t: t.repeat(1, 3, 2), x)
    check(lambda t: t.repeat(0, 2), x)
    check(lambda t: t.repeat(4), make((), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_constant_pad(dtype):
    x = make((2, 3, 4), dtype)
    check(lambda t: F.pad(t, (1, 2)), x)
    check(lambda t: F.pad(t, (1, 0, 0, 2), value=5), x)
    check(lambda t: F.pad(t, (-1, 1, 2, -2, 1, 1)), x)
    check(lambda t: torch.constant_pad_nd(t, [0, 1], 3.5 if dtype.is_floating_point else 3), x)


# ---- gathers ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_index_select(dtype, index_dtype):
    x = make((4, 5, 2), dtype)
    idx = torch.tensor([3, 0, 0, 2], dtype=index_dtype)
    for dim in (0, 1, -1):
        i = idx.clamp(max=x.shape[dim] - 1)
        check(lambda t, ii: torch.index_select(t, dim, ii), x, i)
    check(lambda t, ii: torch.index_select(t, 1, ii), x, torch.zeros(0, dtype=index_dtype))
    check(lambda t, ii: torch.index_select(t, 0, ii), x, torch.tensor(2, dtype=index_dtype))
    check(lambda t, ii: torch.index_select(t, 0, ii), make((), dtype), torch.tensor([0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_gather(dtype):
    x = make((3, 4), dtype)
    idx = torch.tensor([[0, 3], [1, 1], [2, 0]])
    check(lambda t, i: torch.gather(t, 1, i), x, idx)
    check(lambda t, i: torch.gather(t, 0, i), x, torch.tensor([[2, 0, 1], [0, 0, 2]]))
    check(lambda t, i: torch.gather(t, -1, i), make((2, 3, 4), dtype),
          torch.tensor([[[3], [0], [1]], [[2], [2], [0]]]))
    check(lambda t, i: torch.gather(t, 0, i), make((), dtype), torch.tensor(0))


def test_gather_from_views():
    x = make((4, 6), torch.float32)
    idx = torch.tensor([[0, 2], [1, 1], [2, 0]])
    check(lambda t, i: torch.gather(t[1:, ::2], 1, i), x, idx)
    check(lambda t, i: torch.index_select(t.t(), 0, i), x, torch.tensor([5, 0]))


# ---- factories ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.bfloat16,
                                   torch.float64])
def test_arange(dtype):
    for args in [(10,), (2, 9), (0, 1, 0.1), (-3, 4, 2), (5, -2, -1.5)]:
        if not dtype.is_floating_point and any(isinstance(a, float) for a in args):
            continue
        expected = torch.arange(*args, dtype=dtype)
        compare(torch.arange(*args, dtype=dtype, device=DEV), expected)
    out = torch.empty(0, dtype=dtype, device=DEV)
    torch.arange(1, 6, out=out)
    compare(out, torch.arange(1, 6, dtype=dtype))
    out = torch.empty(4, dtype=dtype, device=DEV)
    torch.ops.aten.arange.out(4, out=out)
    compare(out, torch.arange(4, dtype=dtype))


def test_arange_after_empty_result():
    # Out= factories size their output from scalar values, which stay out of the signature:
    # an empty result must not leave a cached program that keeps later results empty.
    compare(torch.arange(0, 0, dtype=torch.int16, device=DEV), torch.arange(0, 0, dtype=torch.int16))
    compare(torch.arange(0, 3, dtype=torch.int16, device=DEV), torch.arange(0, 3, dtype=torch.int16))
    out = torch.empty(5, dtype=torch.int16, device=DEV)
    torch.arange(0, 7, out=out)
    compare(out, torch.arange(0, 7, dtype=torch.int16))


def test_arange_default_dtypes():
    compare(torch.arange(5, device=DEV), torch.arange(5))
    compare(torch.arange(0.5, 3, device=DEV), torch.arange(0.5, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.float64])
def test_linspace(dtype):
    for start, end, steps in [(0, 1, 5), (-2, 7, 10), (3, -3, 7), (1, 1, 1), (0, 5, 0), (0, 10, 4)]:
        compare(torch.linspace(start, end, steps, dtype=dtype, device=DEV),
                torch.linspace(start, end, steps, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_eye(dtype):
    compare(torch.eye(3, dtype=dtype, device=DEV), torch.eye(3, dtype=dtype))
    compare(torch.eye(2, 4, dtype=dtype, device=DEV), torch.eye(2, 4, dtype=dtype))
    compare(torch.eye(0, dtype=dtype, device=DEV), torch.eye(0, dtype=dtype))
    out = torch.empty(3, 3, dtype=dtype, device=DEV)
    torch.ops.aten.eye.out(3, out=out)
    compare(out, torch.eye(3, dtype=dtype))
    assert math.isclose(torch.eye(4, device=DEV).sum().item(), 4.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                   torch.bool])
def test_addr_matches_cpu_and_rounds_half_once(dtype):
    import torchtpu

    g = torch.Generator().manual_seed(0)
    x, a, b = ((torch.randn(*s, generator=g) * 3).to(dtype) for s in ((5, 4), (5,), (4,)))
    if dtype == torch.bool:
        kws = [{}, {"beta": True, "alpha": False}, {"beta": False, "alpha": True}]
    elif dtype.is_floating_point:
        kws = [{}, {"beta": 0.6, "alpha": 0.2}]
    else:
        kws = [{}, {"beta": 2, "alpha": -3}]
    torchtpu.reset_metrics()
    for kw in kws:
        want = torch.addr(x, a, b, **kw)
        got = torch.addr(x.to("tpu"), a.to("tpu"), b.to("tpu"), **kw).cpu()
        assert got.dtype == want.dtype
        if dtype in (torch.bfloat16, torch.float16):
            # One rounding of the float64 result: never further from it than CPU's composite
            # (which rounds the outer product, the scalings and the sum separately).
            exact = torch.addr(x.double(), a.double(), b.double(), **kw)
            assert torch.equal(got, exact.to(dtype))
            assert (got.double() - exact).abs().max() <= (want.double() - exact).abs().max()
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torchtpu.metrics()["cpu_fallbacks_by_op"] == {}


def test_addr_beta_zero_ignores_nan_in_self():
    x = torch.full((2, 3), float("nan"))
    got = torch.addr(x.to("tpu"), torch.ones(2, device="tpu"), torch.ones(3, device="tpu"),
                     beta=0, alpha=2).cpu()
    assert torch.equal(got, torch.addr(x, torch.ones(2), torch.ones(3), beta=0, alpha=2))


# ---- triu_indices / tril_indices ----

SHAPES = [(0, 0), (0, 3), (3, 0), (1, 1), (3, 3), (4, 6), (6, 4), (5, 1), (1, 5), (17, 9)]
OFFSETS = [-2**62, -100, -7, -4, -3, -1, 0, 1, 2, 3, 5, 8, 100, 2**62]


@pytest.mark.parametrize("fn", [torch.triu_indices, torch.tril_indices])
@pytest.mark.parametrize("row,col", SHAPES)
def test_trilu_indices(fn, row, col):
    before = fallback_counts()
    for offset in OFFSETS:
        for dtype in (torch.int64, torch.int32):
            got = fn(row, col, offset, dtype=dtype, device="tpu")
            want = fn(row, col, offset, dtype=dtype)
            assert got.device.type == "tpu"
            assert got.dtype == want.dtype and got.shape == want.shape, (offset, dtype)
            assert torch.equal(got.cpu(), want), (row, col, offset, dtype)
    assert not new_fallbacks(before)


@pytest.mark.parametrize("fn", [torch.triu_indices, torch.tril_indices])
def test_trilu_indices_defaults_device_and_out(fn):
    before = fallback_counts()
    got = fn(300, 200, device="tpu:1")
    assert got.device == torch.device("tpu:1") and got.dtype == torch.int64
    assert torch.equal(got.cpu(), fn(300, 200))
    out = torch.empty(0, dtype=torch.int32, device="tpu")
    getattr(torch.ops.aten, fn.__name__).out(5, 7, -2, out=out)
    assert out.dtype == torch.int32 and torch.equal(out.cpu(), fn(5, 7, -2, dtype=torch.int32))
    assert not new_fallbacks(before)


def test_trilu_indices_compiled():
    from torchtpu import _dynamo as tpu_dynamo

    def f(x):
        i = torch.triu_indices(4, 5, 1, device=x.device)
        j = torch.tril_indices(5, 4, -1, dtype=torch.int32, device=x.device)
        return x[i[0], i[1]] * 2, j * 3

    x = torch.randn(4, 5)
    before = set(tpu_dynamo.graph_metrics())
    got = torch.compile(f, backend="tpu")(x.to("tpu"))
    for a, e in zip(got, f(x)):
        assert a.dtype == e.dtype and torch.equal(a.cpu(), e)
    graphs = {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in before}
    assert graphs and not any("eager_reason" in g for g in graphs.values()), graphs


@pytest.mark.parametrize("fn", [torch.triu_indices, torch.tril_indices])
def test_trilu_indices_errors(fn):
    name = fn.__name__
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        fn(-1, 3, device="tpu")
    with pytest.raises(RuntimeError, match="col must be non-negative"):
        fn(3, -1, device="tpu")
    for dtype in (torch.float32, torch.uint8, torch.bool, torch.float16):
        with pytest.raises(NotImplementedError, match=f'"{name}" not implemented for'):
            fn(3, 3, dtype=dtype, device="tpu")
