"""Statistics and search on tpu against CPU PyTorch (exact), with gradients where PyTorch has
them, and without CPU fallback: median, nanmedian, mode, histogram/histogramdd, bincount,
searchsorted, bucketize, isin and repeat_interleave."""

import pytest
import torch

import torchtpu
from torchtpu.testing.fallbacks import fallback_counts, make, new_fallbacks
from conftest import assert_exactly_cpu, assert_same_error

NAN = float("nan")
DTYPES = [torch.float32, torch.bfloat16, torch.int64]


pytestmark = pytest.mark.usefixtures("no_cpu_fallback")


_same = assert_exactly_cpu  # conftest.py


def _distinct(dtype, shape, seed=0):
    """Distinct values (so the indices of order statistics are unambiguous)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g) - n // 2).reshape(shape).to(dtype)


def _tpu(x):
    return x.to("tpu")


# ---- median / nanmedian ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [torch.median, torch.nanmedian])
def test_median_matches_cpu(dtype, op):
    for shape in [(7,), (4, 6), (3, 4, 5)]:
        x = _distinct(dtype, shape)
        _same(op(_tpu(x)), op(x))
        for dim in range(-len(shape), len(shape)):
            for keepdim in (False, True):
                _same(op(_tpu(x), dim, keepdim), op(x, dim, keepdim))
    _same(op(_tpu(torch.tensor(3, dtype=dtype)), 0), op(torch.tensor(3, dtype=dtype), 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", [torch.median, torch.nanmedian])
def test_median_nan(dtype, op):
    x = _distinct(torch.float32, (5, 7))
    x[1, 3] = NAN
    x[3, 2] = NAN
    x[3, 5] = NAN
    x[4, 0] = NAN
    x[4, 6] = NAN
    x = x.to(dtype)
    _same(op(_tpu(x)), op(x))
    _same(op(_tpu(x), 1), op(x, 1))
    _same(op(_tpu(x), 0), op(x, 0))
    # all-NaN slices: the value (NaN) matches; the CPU's index there is an nth_element artifact
    y = torch.full((2, 3), NAN, dtype=dtype)
    _same(op(_tpu(y), 1).values, op(y, 1).values)
    _same(op(_tpu(y)), op(y))


def test_median_ties_index_points_at_value():
    x = torch.tensor([[1.0, 2.0, 2.0, 3.0, 2.0], [0.0, -0.0, 0.0, 5.0, -1.0]])
    v, i = torch.median(_tpu(x), 1)
    _same(v, torch.median(x, 1).values)
    _same(_tpu(x).gather(1, i.unsqueeze(1)).squeeze(1), v.cpu())


@pytest.mark.parametrize("op", [torch.median, torch.nanmedian])
def test_median_grad(op):
    x = _distinct(torch.float32, (4, 5)) / 3
    for args in [(), (1,), (0, True)]:
        a = x.clone().requires_grad_()
        b = _tpu(x).requires_grad_()
        ra, rb = op(a, *args), op(b, *args)
        ra = ra if isinstance(ra, torch.Tensor) else ra.values
        rb = rb if isinstance(rb, torch.Tensor) else rb.values
        w = torch.arange(ra.numel(), dtype=torch.float32).reshape(ra.shape) + 1
        (ra * w).sum().backward()
        (rb * _tpu(w)).sum().backward()
        _same(b.grad, a.grad)


# ---- mode ----

@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_mode_matches_cpu(dtype):
    # Slices of at most 16 elements, where the CPU's sort is stable (its index convention:
    # the last occurrence of the smallest most-frequent value).
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-2, 3, (5, 12), generator=g).to(dtype)
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            _same(torch.mode(_tpu(x), dim, keepdim), torch.mode(x, dim, keepdim))
    _same(torch.mode(_tpu(x[0, :1])), torch.mode(x[0, :1]))
    _same(torch.mode(_tpu(torch.tensor(2, dtype=dtype))), torch.mode(torch.tensor(2, dtype=dtype)))


def test_mode_grad():
    x = torch.tensor([[1.0, 2.0, 2.0, 3.0], [4.0, 4.0, 1.0, 1.0]])
    a = x.clone().requires_grad_()
    b = _tpu(x).requires_grad_()
    torch.mode(a, 1).values.sum().backward()
    torch.mode(b, 1).values.sum().backward()
    _same(b.grad, a.grad)


# ---- searchsorted / bucketize ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_matches_cpu(dtype, right):
    g = torch.Generator().manual_seed(2)
    seq = torch.randint(-5, 5, (3, 9), generator=g).sort(1).values.to(dtype)
    vals = torch.randint(-6, 6, (3, 4), generator=g).to(dtype)
    _same(torch.searchsorted(_tpu(seq), _tpu(vals), right=right),
          torch.searchsorted(seq, vals, right=right))
    _same(torch.searchsorted(_tpu(seq[0]), _tpu(vals), out_int32=True, right=right),
          torch.searchsorted(seq[0], vals, out_int32=True, right=right))
    side = "right" if right else "left"
    _same(torch.searchsorted(_tpu(seq[1]), 2, side=side), torch.searchsorted(seq[1], 2, side=side))
    shuffled = torch.randint(-5, 5, (3, 9), generator=g).to(dtype)
    sorter = shuffled.argsort(dim=1, stable=True)
    _same(torch.searchsorted(_tpu(shuffled), _tpu(vals), right=right, sorter=_tpu(sorter)),
          torch.searchsorted(shuffled, vals, right=right, sorter=sorter))
    _same(torch.bucketize(_tpu(vals), _tpu(seq[2]), right=right),
          torch.bucketize(vals, seq[2], right=right))
    _same(torch.bucketize(3, _tpu(seq[2]), right=right, out_int32=True),
          torch.bucketize(3, seq[2], right=right, out_int32=True))


def test_searchsorted_nan():
    seq = torch.tensor([1.0, 2.0, 3.0, NAN, NAN])
    vals = torch.tensor([0.5, 2.0, 2.5, NAN, 9.0])
    for right in (False, True):
        _same(torch.searchsorted(_tpu(seq), _tpu(vals), right=right),
              torch.searchsorted(seq, vals, right=right))
        _same(torch.bucketize(_tpu(vals), _tpu(seq), right=right),
              torch.bucketize(vals, seq, right=right))


@pytest.mark.parametrize("case", ["bucketize_2d", "bucketize_0d", "bucketize_out_2d",
                                  "bucketize_scalar_2d", "bucketize_scalar_0d",
                                  "searchsorted_scalar_0d_seq", "searchsorted_0d_seq"])
def test_search_shapes_the_cpu_refuses_raise_its_error(case):
    # bucketize takes 1-D boundaries only (searchsorted takes N-D sorted sequences); these shapes
    # returned values on tpu, and a Scalar against 2-D boundaries crashed the process.
    seq2, seq0 = torch.tensor([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]), torch.tensor(2.0)
    vals = torch.tensor([[0.0, 3.5], [4.0, 7.0]])
    fns = {
        "bucketize_2d": (lambda v, b: torch.bucketize(v, b), vals, seq2),
        "bucketize_0d": (lambda v, b: torch.bucketize(v, b), vals, seq0),
        "bucketize_out_2d": (lambda v, b: torch.bucketize(
            v, b, out=torch.empty(2, 2, dtype=torch.long, device=v.device)), vals, seq2),
        "bucketize_scalar_2d": (lambda b: torch.bucketize(3.0, b), seq2),
        "bucketize_scalar_0d": (lambda b: torch.bucketize(3.0, b), seq0),
        "searchsorted_scalar_0d_seq": (lambda b: torch.searchsorted(b, 3.0), seq0),
        "searchsorted_0d_seq": (lambda b, v: torch.searchsorted(b, v), seq0, vals),
    }
    fn, *args = fns[case]
    assert_same_error(fn, *args)


# ---- isin ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("invert", [False, True])
def test_isin_matches_cpu(dtype, invert):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-4, 4, (3, 5), generator=g).to(dtype)
    t = torch.tensor([-2, 0, 3, 3]).to(dtype)
    _same(torch.isin(_tpu(x), _tpu(t), invert=invert), torch.isin(x, t, invert=invert))
    _same(torch.isin(_tpu(x), 1, invert=invert), torch.isin(x, 1, invert=invert))
    _same(torch.isin(2, _tpu(t), invert=invert), torch.isin(2, t, invert=invert))
    _same(torch.isin(_tpu(x), _tpu(t[:0]), invert=invert), torch.isin(x, t[:0], invert=invert))
    out = torch.empty(3, 5, dtype=torch.bool, device="tpu")
    torch.isin(_tpu(x), _tpu(t), invert=invert, out=out)
    _same(out, torch.isin(x, t, invert=invert))


def test_isin_nan_and_signed_zero():
    x = torch.tensor([NAN, 0.0, -0.0, 1.0])
    t = torch.tensor([NAN, -0.0])
    _same(torch.isin(_tpu(x), _tpu(t)), torch.isin(x, t))


# ---- repeat_interleave ----

@pytest.mark.parametrize("rdtype", [torch.int64, torch.int32])
def test_repeat_interleave_matches_cpu(rdtype):
    r = torch.tensor([2, 0, 3, 1, 0], dtype=rdtype)
    _same(torch.repeat_interleave(_tpu(r)), torch.repeat_interleave(r))
    _same(torch.repeat_interleave(_tpu(r), output_size=6), torch.repeat_interleave(r))
    for dtype in DTYPES:
        x = _distinct(dtype, (5, 3))
        _same(_tpu(x).repeat_interleave(_tpu(r), dim=0), x.repeat_interleave(r, dim=0))
        _same(_tpu(x).repeat_interleave(_tpu(r[:3]), dim=1), x.repeat_interleave(r[:3], dim=1))
    _same(torch.repeat_interleave(_tpu(r[:0])), torch.repeat_interleave(r[:0]))


def test_repeat_interleave_output_size_needs_no_sync_and_negative_raises():
    r = _tpu(torch.tensor([1, 2]))
    syncs = torchtpu.metrics()["host_syncs"]
    out = torch.repeat_interleave(r, output_size=3)
    assert torchtpu.metrics()["host_syncs"] == syncs
    torch.repeat_interleave(r)
    assert torchtpu.metrics()["host_syncs"] == syncs + 1
    _same(out, torch.tensor([0, 1, 1]))
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(_tpu(torch.tensor([1, -1])))


def test_repeat_interleave_grad():
    x = _distinct(torch.float32, (4, 2))
    r = torch.tensor([1, 3, 0, 2])
    a = x.clone().requires_grad_()
    b = _tpu(x).requires_grad_()
    w = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    (a.repeat_interleave(r, dim=0) * w).sum().backward()
    (b.repeat_interleave(_tpu(r), dim=0) * _tpu(w)).sum().backward()
    _same(b.grad, a.grad)


# ---- histogram / histogramdd ----

def _close(tpu_result, cpu_result):
    if isinstance(cpu_result, (tuple, list)):
        for a, b in zip(tpu_result, cpu_result):
            _close(a, b)
        return
    assert tpu_result.device.type == "tpu"
    torch.testing.assert_close(tpu_result.cpu(), cpu_result, equal_nan=True)


@pytest.mark.parametrize("density", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_histogram_matches_cpu(density, weighted):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(60, generator=g)
    x[3] = NAN
    x[5] = 10.0
    w = torch.rand(60, generator=g) if weighted else None
    wt = _tpu(w) if weighted else None
    kw = dict(density=density)
    _close(torch.histogram(_tpu(x[x == x]), 7, weight=None if w is None else _tpu(w[x == x]), **kw),
           torch.histogram(x[x == x], 7, weight=None if w is None else w[x == x], **kw))
    _close(torch.histogram(_tpu(x), 5, range=(-1.0, 1.0), weight=wt, **kw),
           torch.histogram(x, 5, range=(-1.0, 1.0), weight=w, **kw))
    edges = torch.tensor([-2.0, -0.5, 0.0, 0.1, 3.0])
    _close(torch.histogram(_tpu(x), _tpu(edges), weight=wt, **kw),
           torch.histogram(x, edges, weight=w, **kw))
    _close(torch.histogram(_tpu(torch.full((5,), 2.0)), 4), torch.histogram(torch.full((5,), 2.0), 4))


def test_histogram_non_finite_range_raises():
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histogram(_tpu(torch.tensor([1.0, float("inf")])), 3)


@pytest.mark.parametrize("density", [False, True])
def test_histogramdd_matches_cpu(density):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 3, generator=g)
    w = torch.rand(40, generator=g)
    _close(torch.histogramdd(_tpu(x), [3, 4, 2], density=density),
           torch.histogramdd(x, [3, 4, 2], density=density))
    _close(torch.histogramdd(_tpu(x), [3, 4, 2], weight=_tpu(w), density=density),
           torch.histogramdd(x, [3, 4, 2], weight=w, density=density))
    rng = [-1.0, 1.0, -2.0, 2.0, 0.0, 1.0]
    _close(torch.histogramdd(_tpu(x), [2, 2, 5], range=rng, density=density),
           torch.histogramdd(x, [2, 2, 5], range=rng, density=density))
    bins = [torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([-3.0, 0.5, 3.0]),
            torch.tensor([-2.0, -1.0, 0.0, 2.0])]
    _close(torch.histogramdd(_tpu(x), [_tpu(b) for b in bins], density=density),
           torch.histogramdd(x, bins, density=density))


def test_histogram_out_variants():
    x = torch.randn(4, 5)
    hist = torch.empty(0, device="tpu")
    edges = torch.empty(0, device="tpu")
    torch.histogram(_tpu(x), 4, out=(hist, edges))
    _close((hist, edges), torch.histogram(x, 4))
    bins = torch.tensor([-1.0, 0.0, 2.0])
    torch.histogram(_tpu(x), _tpu(bins), out=(hist, edges))
    _close((hist, edges), torch.histogram(x, bins))


# ---- compiled graphs use the same lowerings ----

def test_compiled_graph():
    def f(a, s, v, r):
        m = torch.median(a, 1)
        return (m.values * 2, m.indices, torch.nanmedian(a), torch.mode(a, 0).values,
                torch.searchsorted(s, v), torch.bucketize(v, s), torch.isin(a, v),
                torch.repeat_interleave(r, output_size=6))

    compiled = torch.compile(f, backend="tpu")
    a = _distinct(torch.float32, (4, 5))
    s = torch.tensor([-3.0, -1.0, 0.0, 2.0, 5.0])
    v = torch.tensor([-2.0, 0.0, 3.0])
    r = torch.tensor([1, 2, 3])
    _same(compiled(_tpu(a), _tpu(s), _tpu(v), _tpu(r)), f(a, s, v, r))


def test_isin_large_sorted_path():
    g = torch.Generator().manual_seed(6)
    x = torch.randint(-3000, 3000, (1500,), generator=g).float()
    t = torch.randint(-3000, 3000, (1000,), generator=g).float()
    x[:3] = torch.tensor([NAN, float("inf"), -float("inf")])
    t[:3] = torch.tensor([NAN, float("inf"), NAN])
    for invert in (False, True):
        _same(torch.isin(_tpu(x), _tpu(t), invert=invert), torch.isin(x, t, invert=invert))
    xi, ti = x[3:].long(), t[3:].long()
    _same(torch.isin(_tpu(xi), _tpu(ti)), torch.isin(xi, ti))


def test_repeat_interleave_large():
    r = torch.randint(0, 5, (3000,), generator=torch.Generator().manual_seed(7))
    _same(torch.repeat_interleave(_tpu(r)), torch.repeat_interleave(r))


def test_histogram_reduced_precision_like_cpu():
    x = torch.randn(20).bfloat16()
    with pytest.raises(NotImplementedError, match="BFloat16"):
        torch.histogram(_tpu(x), 3)
    _close(torch.histogram(_tpu(x), 3, range=(-1.0, 1.0)), torch.histogram(x, 3, range=(-1.0, 1.0)))


# ---- bincount ----

@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("minlength", [0, 3, 20])
def test_bincount(dtype, minlength):
    x = make((50,), dtype, seed=1, low=0, high=12)
    before = fallback_counts()
    got = torch.bincount(x.to("tpu"), minlength=minlength)
    want = torch.bincount(x, minlength=minlength)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want)
    assert not new_fallbacks(before)


@pytest.mark.parametrize("wdtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                    torch.int32, torch.int64, torch.bool])
def test_bincount_weights(wdtype):
    x = make((40,), torch.int64, seed=2, low=0, high=9)
    w = make((40,), wdtype, seed=3)
    before = fallback_counts()
    got = torch.bincount(x.to("tpu"), w.to("tpu"), minlength=5)
    want = torch.bincount(x, w, minlength=5)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
    assert not new_fallbacks(before)


def test_bincount_edge_cases():
    before = fallback_counts()
    for x, w, minlength in [
        (torch.tensor([], dtype=torch.int64), None, 0),
        (torch.tensor([], dtype=torch.int64), None, 4),
        (torch.tensor([], dtype=torch.int32), torch.tensor([], dtype=torch.half), 3),
        (torch.tensor([0]), None, 0),
        (torch.tensor([7, 7, 7]), torch.tensor([0.5, 0.25, 0.125]), 2),
    ]:
        dw = None if w is None else w.to("tpu")
        got = torch.bincount(x.to("tpu"), dw, minlength=minlength)
        want = torch.bincount(x, w, minlength=minlength)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.cpu(), want)
    # out= (not in torch.bincount's Python signature) resizes like the CPU's.
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.ops.aten.bincount.out(torch.tensor([1, 1, 4], device="tpu"), out=out)
    assert torch.equal(out.cpu(), torch.tensor([0, 2, 0, 0, 1]))
    assert not new_fallbacks(before)


def test_bincount_repeats_a_cached_program_per_size():
    # The same signature with new data reuses the count program; only the size is structural.
    x = torch.tensor([3, 1, 3], device="tpu")
    assert torch.equal(torch.bincount(x).cpu(), torch.tensor([0, 1, 0, 2]))
    x = torch.tensor([0, 2, 0], device="tpu")
    assert torch.equal(torch.bincount(x).cpu(), torch.tensor([2, 0, 1]))


@pytest.mark.parametrize("case", [
    (torch.tensor([1, -2]), None, 0),                       # negative value
    (torch.tensor([[1, 2]]), None, 0),                      # 2-d
    (torch.tensor(1), None, 0),                             # 0-d
    (torch.tensor([1, 2]), torch.tensor([1.0, 2, 3]), 0),   # weights length
    (torch.tensor([1, 2]), torch.tensor([[1.0, 2]]), 0),    # weights rank
    (torch.tensor([1, -2]), torch.tensor([1.0, 2, 3]), 0),  # both: the sign is checked first
    (torch.tensor([1, 2]), None, -1),                       # minlength
])
def test_bincount_errors(case):
    x, w, minlength = case
    assert_same_error(lambda a, *b: torch.bincount(a, *b, minlength=minlength),
                *([x] if w is None else [x, w]))


def test_bincount_float_input_not_implemented():
    with pytest.raises(NotImplementedError, match="bincount"):
        torch.bincount(torch.tensor([1.0, 2.0], device="tpu"))
    with pytest.raises(NotImplementedError, match="bincount"):
        torch.bincount(torch.tensor([True, False], device="tpu"))
