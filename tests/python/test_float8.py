"""float8 tensors on tpu (float8_e4m3fn, float8_e5m2 and the fnuz variants) against CPU PyTorch.

Casts follow PyTorch's own conversions, which are not XLA's: float -> float8_e4m3fn saturates
(1000 and inf give 448, only NaN stays NaN) where XLA's convert gives NaN, and a float64 source
is rounded to float32 first (double rounding, as c10's Float8 constructors take a float).
Results are compared bit for bit (NaN payloads aside), so signed zeros and saturation count."""

from __future__ import annotations

import pytest
import torch

import torchtpu  # noqa: F401

F8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
ids = [str(d).removeprefix("torch.") for d in F8]


def all_values(dtype):
    """Every float8 value of `dtype`, NaNs included, as a CPU tensor (256 elements)."""
    return torch.arange(256, dtype=torch.uint8).view(dtype)


def assert_same(tpu: torch.Tensor, cpu: torch.Tensor):
    """Equal dtype, shape and bits; any NaN matches any NaN (payloads are not part of the API)."""
    got = tpu.cpu()
    assert got.dtype == cpu.dtype and got.shape == cpu.shape
    if got.dtype.is_floating_point:
        gnan, cnan = got.float().isnan(), cpu.float().isnan()
        assert torch.equal(gnan, cnan), (got, cpu)
        if got.dtype.itemsize == 1:
            gb, cb = got.view(torch.uint8), cpu.view(torch.uint8)
        else:
            gb, cb = got.float().view(torch.int32), cpu.float().view(torch.int32)
        bad = (gb != cb) & ~cnan
        assert not bad.any(), (got[bad], cpu[bad], gb[bad], cb[bad])
    else:
        assert torch.equal(got, cpu), (got, cpu)


def cast_inputs() -> torch.Tensor:
    """float32 values that exercise rounding: every float8 value of every format, the midpoints
    between neighbours (ties to even), one ulp either side of them, overflow, inf and NaN."""
    grid = torch.cat([all_values(d).float() for d in F8])
    grid = grid[grid.isfinite()].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    up = torch.nextafter(mids, torch.tensor(float("inf")))
    down = torch.nextafter(mids, torch.tensor(float("-inf")))
    extra = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 240.0, 247.9, 248.0, 448.0, 464.0, 470.0,
                          480.0, 1000.0, 57344.0, 61439.0, 61440.0, 1e6, 3.4e38,
                          float("inf"), float("nan")])
    v = torch.cat([grid, mids, up, down, extra])
    return torch.cat([v, -v])


@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_every_bit_pattern_round_trips(dtype):
    x = all_values(dtype)
    t = x.to("tpu")
    assert t.dtype == dtype and t.device.type == "tpu"
    back = t.cpu()
    assert torch.equal(back.view(torch.uint8), x.view(torch.uint8))


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_cast_to_float8_matches_cpu(src, dtype):
    v = cast_inputs().to(src)
    assert_same(v.to("tpu").to(dtype), v.to(dtype))
    # The same cast inside a fused expression (a scale, as FP8 recipes do before casting).
    assert_same((v.to("tpu") * 2).to(dtype), (v * 2).to(dtype))


@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_float64_rounds_through_float32_like_cpu(dtype):
    # Just above a float8 tie in float64, but exactly the tie once rounded to float32: PyTorch's
    # double -> float -> float8 conversion rounds the tie to even; a direct conversion would not.
    grid = all_values(dtype).double()
    grid = grid[grid.isfinite()].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    v = torch.cat([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40)])
    assert_same(v.to("tpu").to(dtype), v.to(dtype))


@pytest.mark.parametrize("dst", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_cast_from_float8_matches_cpu(dtype, dst):
    x = all_values(dtype)
    assert_same(x.to("tpu").to(dst), x.to(dst))


@pytest.mark.parametrize("dst", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                                 torch.bool])
@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_cast_float8_to_integers_matches_cpu(dtype, dst):
    x = all_values(dtype)
    if dst != torch.bool:
        x = x[x.float().isfinite()]  # NaN or inf -> int is undefined behaviour in C++
    assert_same(x.to("tpu").to(dst), x.to(dst))


@pytest.mark.parametrize("src", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_cast_integers_to_float8_matches_cpu(src, dtype):
    v = torch.cat([torch.arange(-300, 300), torch.tensor([1000, 65535, 70000, -70000, 2**40])])
    v = v.to(src) if src != torch.bool else v > 0
    assert_same(v.to("tpu").to(dtype), v.to(dtype))


@pytest.mark.parametrize("dtype", F8, ids=ids)
@pytest.mark.parametrize("other", F8, ids=ids)
def test_cast_between_float8_formats_matches_cpu(dtype, other):
    x = all_values(dtype)
    assert_same(x.to("tpu").to(other), x.to(other))


@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_factories_match_cpu(dtype):
    kw = dict(dtype=dtype)
    assert_same(torch.zeros(2, 3, device="tpu", **kw), torch.zeros(2, 3, **kw))
    assert_same(torch.ones(4, device="tpu", **kw), torch.ones(4, **kw))
    assert_same(torch.full((3,), 1.75, device="tpu", **kw), torch.full((3,), 1.75, **kw))
    assert_same(torch.eye(3, device="tpu", **kw), torch.eye(3, **kw))
    vals = [0.1, -2.5, 3.0, 100.0]
    assert_same(torch.tensor(vals, device="tpu", **kw), torch.tensor(vals, **kw))
    e = torch.empty(5, 2, device="tpu", **kw)
    assert e.shape == (5, 2) and e.dtype == dtype and e.device.type == "tpu"
    x = all_values(dtype)
    assert_same(torch.zeros_like(x.to("tpu")), torch.zeros_like(x))
    assert_same(torch.ones_like(x.to("tpu")), torch.ones_like(x))


@pytest.mark.parametrize("value", [1000.0, 1e6, 250.0, 60000.0, float("inf"), float("nan")])
@pytest.mark.parametrize("numel", [1, 3])
@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_fill_out_of_range_matches_cpu(dtype, numel, value):
    # The CPU checks the fill value against the format's range (raising for a 3-element tensor)
    # but fills a 1-element tensor through a path that converts (and saturates) without checking.
    try:
        want = torch.full((numel,), value, dtype=dtype)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e).replace("(", r"\(").replace(")", r"\)")):
            torch.full((numel,), value, dtype=dtype, device="tpu")
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.zeros(numel, dtype=dtype, device="tpu").fill_(value)
        return
    assert_same(torch.full((numel,), value, dtype=dtype, device="tpu"), want)
    assert_same(torch.zeros(numel, dtype=dtype, device="tpu").fill_(value), want)


@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_views_and_data_movement_match_cpu(dtype):
    x = all_values(dtype)[:240].reshape(12, 20)
    t = x.to("tpu")
    assert_same(t.view(torch.uint8), x.view(torch.uint8))
    assert_same(t.view(torch.uint8).view(dtype), x)
    assert_same(x.view(torch.uint8).to("tpu").view(dtype), x)
    assert_same(t.t().contiguous(), x.t().contiguous())
    assert_same(t[2:9:3, 1::4], x[2:9:3, 1::4])
    assert_same(t.reshape(4, 60), x.reshape(4, 60))
    assert t.t().stride() == x.t().stride()
    idx = torch.tensor([0, 5, 11, 5])
    assert_same(t[idx.to("tpu")], x[idx])
    assert_same(t.index_select(1, idx.to("tpu")), x.index_select(1, idx))
    assert_same(torch.cat([t, t[:3]]), torch.cat([x, x[:3]]))
    assert_same(torch.stack([t[0], t[1]]), torch.stack([x[0], x[1]]))
    assert_same(torch.nn.functional.pad(t, (1, 2)), torch.nn.functional.pad(x, (1, 2)))
    assert_same(t[:2].repeat(2, 3), x[:2].repeat(2, 3))
    assert_same(t[:1].expand(3, 20).contiguous(), x[:1].expand(3, 20).contiguous())
    assert_same(t.roll(3, 1), x.roll(3, 1))
    assert_same(t[:5, :5].diag(), x[:5, :5].diag())
    assert_same(t.clone(), x.clone())

    y, u = x.clone(), t.clone()
    y.index_put_((torch.tensor([1, 3]),), x[5:7])
    u.index_put_((torch.tensor([1, 3], device="tpu"),), t[5:7])
    assert_same(u, y)
    # copy_ between dtypes and devices casts like .to().
    src = cast_inputs()[:20].reshape(1, 20)
    y, u = x.clone(), t.clone()
    y[4:5].copy_(src)
    u[4:5].copy_(src.to("tpu"))
    assert_same(u, y)
    u[6:7].copy_(src)  # a CPU source straight into a tpu float8 view
    y[6:7].copy_(src)
    assert_same(u, y)


@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_elementwise_where_cpu_supports_them(dtype):
    x = all_values(dtype)
    a, b = x.repeat_interleave(256), x.repeat(256)  # every pair of values
    ta, tb = a.to("tpu"), b.to("tpu")
    assert_same(ta * tb, a * b)
    assert_same(ta == tb, a == b)
    assert_same(ta != tb, a != b)
    t = x.to("tpu")
    assert_same(t.abs(), x.abs())
    assert_same(t.isnan(), x.isnan())
    assert_same(t.any(), x.any())
    assert_same(t[:1].any(), x[:1].any())
    if dtype == torch.float8_e5m2:  # the one format with infinities the CPU asks about
        assert_same(t.isinf(), x.isinf())
        assert_same(t.isfinite(), x.isfinite())


@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_matmul_matches_cpu(dtype):
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(8, 16, generator=g) * 2).to(dtype)
    b = (torch.randn(16, 4, generator=g) * 2).to(dtype)
    assert_same(a.to("tpu") @ b.to("tpu"), a @ b)
    w = (torch.randn(5, 16, generator=g)).to(dtype)
    assert_same(torch.nn.functional.linear(a.to("tpu"), w.to("tpu")),
                torch.nn.functional.linear(a, w))


def test_process_stays_usable_after_float8_errors():
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.full((2,), 1000.0, dtype=torch.float8_e4m3fn, device="tpu")
    x = torch.tensor([1.0, 2.0], device="tpu").to(torch.float8_e4m3fn)
    assert x.float().cpu().tolist() == [1.0, 2.0]


# ---- torch._scaled_mm ----
# Compared with the CPU's own torch._scaled_mm, which supports per-tensor and row-wise scales
# (its emulation: each operand dequantized in float32, an f32 matmul, bias, output scale, cast).
# tpu keeps the operands float8 in one dot (f32 accumulation) and scales the product, as CUDA
# does, so on random data the two differ by f32 rounding only; on data where every step is exact
# (small integers, power-of-two scales) they must agree bit for bit, saturation included.
#
# The CPU has a second _scaled_mm, chosen by the processor: on a host with AMX (Intel Sapphire
# Rapids and later) it runs oneDNN's fp8 matmul, which turns a float8_e4m3fn overflow into NaN and
# checks its arguments with other messages ("Expected mat1 to be Float8 matrix got Float"); an AMD
# host, or any host with oneDNN off, runs the emulation (issue 32: both float8 tests failed on an
# Intel AMX host). So the CPU reference runs with oneDNN off (`cpu_scaled_mm`): the same code on
# every host. tpu follows PyTorch's documented cast there: float -> float8_e4m3fn saturates to
# +-448 (`torch.tensor([500.]).to(torch.float8_e4m3fn)` is 448 on every host), the conversion
# CUDA's `.to()` uses as well; oneDNN's NaN is the outlier. test_scaled_mm_exact_matches_cpu_bitwise
# also checks the overflow case against a float64 product and that documented cast.


def cpu_scaled_mm(*args, **kw):
    """The CPU's torch._scaled_mm as it runs on every host: its emulation, not oneDNN's fp8 path
    (which only AMX hosts take, and which differs in overflow and in its error messages)."""
    with torch.backends.mkldnn.flags(enabled=False):
        return torch._scaled_mm(*args, **kw)

SCALED_IN = [(torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e4m3fn, torch.float8_e5m2),
             (torch.float8_e5m2, torch.float8_e4m3fn), (torch.float8_e5m2fnuz, torch.float8_e4m3fnuz)]
SCALED_IN_IDS = ["e4m3-e4m3", "e4m3-e5m2", "e5m2-e4m3", "fnuz"]


def scales(kind, m, n, g, exact=False):
    if kind == "tensor":
        return (torch.tensor(0.5), torch.tensor(2.0)) if exact else (
            torch.rand((), generator=g) + 0.5, torch.rand((), generator=g) + 0.5)
    if exact:
        sa = 2.0 ** torch.randint(-2, 3, (m, 1), generator=g).float()
        sb = 2.0 ** torch.randint(-2, 3, (1, n), generator=g).float()
        return sa, sb
    return torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, n, generator=g) + 0.5


def scaled_mm_both(a, b, sa, sb, **kw):
    """torch._scaled_mm on the CPU and on tpu (tensor keyword arguments moved too)."""
    cpu = cpu_scaled_mm(a, b, sa, sb, **kw)
    dkw = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    dev = torch._scaled_mm(a.to("tpu"), b.to("tpu"), sa.to("tpu"), sb.to("tpu"), **dkw)
    return dev, cpu


OUT_DTYPES = [torch.float32, torch.bfloat16, torch.float16, None, torch.float8_e4m3fn,
              torch.float8_e5m2]


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["tensor", "row"])
@pytest.mark.parametrize("dtypes", SCALED_IN, ids=SCALED_IN_IDS)
def test_scaled_mm_exact_matches_cpu_bitwise(dtypes, kind, out_dtype):
    g = torch.Generator().manual_seed(1)
    m, k, n = 24, 40, 8  # not multiples of 16: the CPU (unlike CUDA) takes any size
    a = torch.randint(-4, 5, (m, k), generator=g).to(dtypes[0])
    b = torch.randint(-4, 5, (n, k), generator=g).to(dtypes[1]).t()  # column-major, like CUDA
    sa, sb = scales(kind, m, n, g, exact=True)
    dev, cpu = scaled_mm_both(a, b, sa, sb, out_dtype=out_dtype)
    assert_same(dev, cpu)
    # Row-major mat2, and a bias (in the output's dtype when that is not float8).
    bias = torch.randint(-8, 9, (n,), generator=g).to(
        out_dtype if out_dtype in (torch.float32, torch.bfloat16, torch.float16) else
        torch.float32)
    if out_dtype is not None and not out_dtype.itemsize == 1:
        dev, cpu = scaled_mm_both(a, b.contiguous(), sa, sb, bias=bias, out_dtype=out_dtype)
        assert_same(dev, cpu)
    if out_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        # The output scale divides the result before the cast; 0.125 pushes values past 448
        # (e4m3fn saturates) and into e5m2's coarse range.
        dev, cpu = scaled_mm_both(a, b, sa, sb, scale_result=torch.tensor(0.125),
                                  out_dtype=out_dtype)
        assert_same(dev, cpu)
        # The same against a reference that does not depend on any CPU kernel: the product of
        # small integers and powers of two is exact in float64 and in float32, so the result is
        # PyTorch's documented float32 -> float8 cast of it (e4m3fn: saturating to +-448).
        exact = ((a.double() * sa.double()) @ (b.double() * sb.double()) / 0.125).float()
        assert exact.abs().max() > 448  # the case reaches e4m3fn's overflow
        assert_same(dev, exact.to(out_dtype))


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("kind", ["tensor", "row"])
@pytest.mark.parametrize("dtypes", SCALED_IN[:3], ids=SCALED_IN_IDS[:3])
def test_scaled_mm_random_matches_cpu(dtypes, kind, out_dtype):
    g = torch.Generator().manual_seed(2)
    m, k, n = 32, 64, 48
    a = (torch.randn(m, k, generator=g) * 4).to(dtypes[0])
    b = (torch.randn(n, k, generator=g) * 4).to(dtypes[1]).t()
    sa, sb = scales(kind, m, n, g)
    bias = torch.randn(n, generator=g).to(out_dtype)
    dev, cpu = scaled_mm_both(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    assert dev.dtype == cpu.dtype == out_dtype and dev.device.type == "tpu"
    # f32: rounding of the f32 sums only; narrower results: at most one ulp of the output.
    tol = {torch.float32: dict(rtol=1e-5, atol=1e-4), torch.bfloat16: dict(rtol=2**-7, atol=1e-2),
           torch.float16: dict(rtol=2**-10, atol=1e-3)}[out_dtype]
    torch.testing.assert_close(dev.cpu(), cpu, **tol)
    # Against a float64 product of the dequantized operands, tpu's error is the CPU's order of
    # size (both sum in f32, in different orders).
    ref = (a.double() * sa.double()) @ (b.double() * sb.double()) + bias.double()
    err_dev = (dev.cpu().double() - ref).abs().max().item()
    err_cpu = (cpu.double() - ref).abs().max().item()
    assert err_dev <= err_cpu * 2 + 1e-5, (err_dev, err_cpu)


@pytest.mark.usefixtures("no_cpu_fallback")
def test_scaled_mm_out_and_compiled_match_cpu():
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-4, 5, (16, 32), generator=g).to(torch.float8_e4m3fn)
    b = torch.randint(-4, 5, (32, 16), generator=g).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(0.25), torch.tensor(4.0)
    want = cpu_scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    out = torch.empty(0, device="tpu", dtype=torch.bfloat16)  # resized like the CPU's out=
    r = torch._scaled_mm(a.to("tpu"), b.to("tpu"), sa.to("tpu"), sb.to("tpu"),
                         out_dtype=torch.bfloat16, out=out)
    assert r is out
    assert_same(out, want)
    out32 = torch.empty(16, 16, device="tpu")  # no out_dtype: the result takes out's dtype
    torch._scaled_mm(a.to("tpu"), b.to("tpu"), sa.to("tpu"), sb.to("tpu"), out=out32)
    assert_same(out32, cpu_scaled_mm(a, b, sa, sb, out=torch.empty(16, 16)))

    def fn(a, b, sa, sb, bias):
        return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.float32).relu()

    bias = torch.randn(16, generator=g)
    compiled = torch.compile(fn, backend="tpu", fullgraph=True)
    args = [x.to("tpu") for x in (a, b, sa, sb, bias)]
    with torch.backends.mkldnn.flags(enabled=False):  # the CPU reference of every host
        want = fn(a, b, sa, sb, bias)
    torch.testing.assert_close(compiled(*args).cpu(), want)


def test_scaled_mm_bad_input_raises_like_cpu():
    from conftest import assert_same_error as same_error

    def assert_same_error(*args):
        # The CPU's errors as every host raises them: an AMX host's oneDNN path checks its
        # arguments with other messages (see cpu_scaled_mm).
        with torch.backends.mkldnn.flags(enabled=False):
            same_error(*args)

    a = torch.randint(-4, 5, (16, 32)).to(torch.float8_e4m3fn)
    b = torch.randint(-4, 5, (32, 16)).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    mm = torch._scaled_mm
    assert_same_error(mm, a.float(), b.float(), one, one)  # not float8
    assert_same_error(mm, a, b, one.double(), one)  # scale not float32
    assert_same_error(mm, a, b, torch.ones(16, 2), torch.ones(1, 16))  # bad row-wise shape
    assert_same_error(mm, a, b, torch.ones(16, 1), one)  # mixed granularity
    assert_same_error(mm, a, b[:16], one, one)  # shapes do not multiply
    assert_same_error(lambda *t: mm(*t[:4], bias=t[4]), a, b, one, one, torch.ones(5))
    assert_same_error(lambda *t: mm(*t[:4], scale_result=t[4], out_dtype=torch.float8_e4m3fn),
                      a, b, one, one, torch.ones(2))
    assert_same_error(mm, a[0], b, one, one)  # not a matrix
    assert_same_error(lambda *t: mm(*t, out=torch.empty(16, 16, device=t[0].device),
                                    out_dtype=torch.bfloat16), a, b, one, one)
    # The process stays usable.
    r = mm(a.to("tpu"), b.to("tpu"), one.to("tpu"), one.to("tpu"), out_dtype=torch.float32)
    assert_same(r, cpu_scaled_mm(a, b, one, one, out_dtype=torch.float32))


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, None], ids=str)
@pytest.mark.parametrize("kind", ["tensor", "row"])
def test_functional_scaled_mm_matches_cpu(kind, out_dtype):
    # torch.nn.functional.scaled_mm (aten::_scaled_mm_v2) with the recipes the CPU has.
    from torch.nn.functional import ScalingType, scaled_mm

    g = torch.Generator().manual_seed(4)
    m, k, n = 15, 16, 32
    a = torch.randint(-4, 5, (m, k), generator=g).to(torch.float8_e4m3fn)
    b = torch.randint(-4, 5, (n, k), generator=g).to(torch.float8_e4m3fn).t()
    sa, sb = scales(kind, m, n, g, exact=True)
    if kind == "tensor":
        sa, sb = sa.reshape(1), sb.reshape(1)
    recipe = ScalingType.TensorWise if kind == "tensor" else ScalingType.RowWise
    bias = torch.randint(-8, 9, (n,), generator=g).to(torch.bfloat16)

    def run(a, b, sa, sb, bias):
        return scaled_mm(a, b, sa, recipe, sb, recipe, bias=bias, output_dtype=out_dtype)

    want = run(a, b, sa, sb, bias)
    got = run(*(x.to("tpu") for x in (a, b, sa, sb, bias)))
    assert_same(got, want)


def test_functional_scaled_mm_bad_input_raises():
    from torch.nn.functional import ScalingType, SwizzleType, scaled_mm
    from conftest import assert_same_error

    a = torch.randint(-4, 5, (16, 32)).to(torch.float8_e4m3fn)
    b = torch.randint(-4, 5, (32, 16)).to(torch.float8_e4m3fn)
    one = torch.ones(1)
    tw, rw = ScalingType.TensorWise, ScalingType.RowWise
    # A row-wise recipe with tensor-wise scales, and shapes that do not multiply: the CPU's errors.
    assert_same_error(lambda a, b, s: scaled_mm(a, b, s, rw, s, rw), a, b, one)
    assert_same_error(lambda a, b, s: scaled_mm(a, b, s, tw, s, tw), a, b[:8], one)
    assert_same_error(lambda a, b, s, c: scaled_mm(a, b, s, tw, s, tw, bias=c), a, b, one,
                      torch.ones(16, dtype=torch.float64))
    # Swizzled and block-wise scales (CUDA's MX recipes): a clear error, not a wrong value.
    t = [x.to("tpu") for x in (a, b, one)]
    with pytest.raises(ValueError, match="swizzle"):
        scaled_mm(t[0], t[1], t[2], tw, t[2], tw, swizzle_a=SwizzleType.SWIZZLE_32_4_4)
    with pytest.raises(ValueError, match="Invalid scaling configuration"):
        scaled_mm(t[0], t[1], t[2], ScalingType.BlockWise1x32, t[2], ScalingType.BlockWise1x32)


# ---- ops the CPU refuses for float8 ----
# tpu computes these in float32 (PyTorch's opmath for narrow floats) and rounds to float8, so the
# oracle is the op on the float32 values, rounded to the result's dtype. What they must never do
# is treat a missing infinity as a value: e4m3fn has none (an inf constant saturates to 448) and
# the fnuz formats have none either (an inf constant would be their NaN).

def finite_values(dtype):
    x = all_values(dtype)
    return x[x.float().isfinite()]


def assert_like_float32(got, fn, x):
    want = fn(x.float())
    if want.dtype == torch.float32 and got.dtype != torch.float32:
        want = want.to(got.dtype)
    assert_same(got, want)


REDUCTIONS = {
    "max": lambda x: x.max(), "min": lambda x: x.min(), "amax": lambda x: x.amax(),
    "amin": lambda x: x.amin(), "argmax": lambda x: x.argmax(), "argmin": lambda x: x.argmin(),
    "max_dim": lambda x: x.reshape(-1, 2).max(1).values,
    "cummax": lambda x: x.cummax(0).values, "cummin": lambda x: x.cummin(0).values,
    "cummin_indices": lambda x: x.cummin(0).indices,
    "scatter_amax": lambda x: torch.zeros(3, dtype=x.dtype, device=x.device).scatter_reduce(
        0, torch.arange(x.numel(), device=x.device) % 3, x, "amax"),
    "adaptive_max_pool1d": lambda x: torch.nn.functional.adaptive_max_pool1d(x.reshape(1, 1, -1),
                                                                             4),
    "max_pool1d": lambda x: torch.nn.functional.max_pool1d(x.reshape(1, 1, -1), 2),
}


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_max_min_family_beyond_cpu_matches_float32(dtype, name):
    x = finite_values(dtype)
    x = x[: x.numel() // 2 * 2]
    fn = REDUCTIONS[name]
    try:
        got = fn(x.to("tpu"))
        # A module XLA refuses to compile fails where the host reads the result.
        torch.utils._pytree.tree_map(lambda t: t.cpu() if torch.is_tensor(t) else t, got)
    except (RuntimeError, NotImplementedError) as e:  # refused with a clear error is fine
        assert "Float8" in str(e) or "not implemented" in str(e), e
        return
    assert_like_float32(got, fn, x)


@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_float_predicates_and_signbit(dtype):
    x = all_values(dtype)
    t = x.to("tpu")
    # No float8 format but e5m2 has infinities: isinf is False everywhere else (not at +-448).
    for fn in (torch.isinf, torch.isposinf, torch.isneginf, torch.isnan):
        assert_same(fn(t), fn(x.float()))
    finite = x.float().isfinite()
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # -0 and the sign of NaN as stored
        assert_same(t.signbit(), x.view(torch.int8) < 0)
    else:
        assert_same(t.signbit()[finite.to("tpu")], x.float()[finite].signbit())


def _fp8_linear(x, w, bias):
    # torchao-style dynamic tensor-wise scaling: amax -> scale -> saturating cast -> _scaled_mm.
    e4 = torch.float8_e4m3fn
    sx = 448.0 / x.abs().amax().clamp(min=1e-12).float()
    sw = 448.0 / w.abs().amax().clamp(min=1e-12).float()
    xf = (x * sx).clamp(-448, 448).to(e4)
    wf = (w * sw).clamp(-448, 448).to(e4)
    return torch._scaled_mm(xf, wf.t(), (1 / sx).reshape(()), (1 / sw).reshape(()), bias=bias,
                            out_dtype=torch.bfloat16)


@pytest.mark.usefixtures("no_cpu_fallback")
def test_dynamic_float8_linear_eager_and_compiled_match_cpu():
    g = torch.Generator().manual_seed(5)
    x, w, b = (torch.randn(s, generator=g).to(torch.bfloat16) for s in ((32, 64), (48, 64), (48,)))
    with torch.backends.mkldnn.flags(enabled=False):  # see cpu_scaled_mm
        want = _fp8_linear(x, w, b)
    args = [t.to("tpu") for t in (x, w, b)]
    # The same casts, scales and f32-accumulated products: equal to the CPU's within one bf16
    # rounding of the f32 result (here bit for bit).
    torch.testing.assert_close(_fp8_linear(*args).cpu(), want, rtol=2**-7, atol=0)
    compiled = torch.compile(_fp8_linear, backend="tpu", fullgraph=True)
    torch.testing.assert_close(compiled(*args).cpu(), want, rtol=2**-7, atol=0)
    # Gradients flow through the float8 casts as through any cast (straight through).
    for dev in ("cpu", "tpu"):
        a = torch.randn(8, generator=g).to(dev).requires_grad_()
        (a.to(torch.float8_e4m3fn).to(torch.float32) * 3).sum().backward()
        assert torch.equal(a.grad.cpu(), torch.full((8,), 3.0))


@pytest.mark.parametrize("dtype", F8, ids=ids)
def test_compiled_casts_match_cpu(dtype):
    # The same conversions inside a compiled graph (prims.convert_element_type / _to_copy):
    # saturation, overflow, ties and NaN as in eager mode, both directions.
    v = cast_inputs()
    to_f8 = torch.compile(lambda x: (x * 2).to(dtype), backend="tpu", fullgraph=True)
    assert_same(to_f8(v.to("tpu")), (v * 2).to(dtype))
    x = all_values(dtype)
    from_f8 = torch.compile(lambda x: x.to(torch.bfloat16) * 2, backend="tpu", fullgraph=True)
    assert_same(from_f8(x.to("tpu")), x.to(torch.bfloat16) * 2)
