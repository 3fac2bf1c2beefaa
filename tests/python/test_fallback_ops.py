"""Ops that used to run through the CPU fallback, now native: bincount, triu_indices /
tril_indices, grid_sampler_3d_backward, and multinomial's value checks. Values, dtypes and
shapes against CPU PyTorch, the CPU's errors for bad input, and no CPU fallback."""
import re

import pytest
import torch
import torch.nn.functional as F

from torchtpu.testing.fallbacks import fallback_counts, make, new_fallbacks


def _no_fallback(before):
    grown = new_fallbacks(before)
    assert not grown, grown


def _same_error(fn, *cpu_args, **kwargs):
    """fn raises on tpu what it raises on the CPU (type and message), and nothing falls back."""
    with pytest.raises(Exception) as cpu_err:
        fn(*cpu_args, **kwargs)
    dev_args = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    before = fallback_counts()
    with pytest.raises(cpu_err.type, match=re.escape(str(cpu_err.value).splitlines()[0])):
        fn(*dev_args, **kwargs)
    _no_fallback(before)


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
    _no_fallback(before)


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
    _no_fallback(before)


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
    _no_fallback(before)


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
    _same_error(lambda a, *b: torch.bincount(a, *b, minlength=minlength),
                *([x] if w is None else [x, w]))


def test_bincount_float_input_not_implemented():
    with pytest.raises(NotImplementedError, match="bincount"):
        torch.bincount(torch.tensor([1.0, 2.0], device="tpu"))
    with pytest.raises(NotImplementedError, match="bincount"):
        torch.bincount(torch.tensor([True, False], device="tpu"))


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
    _no_fallback(before)


@pytest.mark.parametrize("fn", [torch.triu_indices, torch.tril_indices])
def test_trilu_indices_defaults_device_and_out(fn):
    before = fallback_counts()
    got = fn(300, 200, device="tpu:1")
    assert got.device == torch.device("tpu:1") and got.dtype == torch.int64
    assert torch.equal(got.cpu(), fn(300, 200))
    out = torch.empty(0, dtype=torch.int32, device="tpu")
    getattr(torch.ops.aten, fn.__name__).out(5, 7, -2, out=out)
    assert out.dtype == torch.int32 and torch.equal(out.cpu(), fn(5, 7, -2, dtype=torch.int32))
    _no_fallback(before)


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


# ---- grid_sampler_3d backward ----

@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_backward(mode, padding, align):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 5, 3) * 3 - 1.5  # many samples outside [-1, 1]

    def fn(a, g):
        return F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=align)

    cpu = [x.clone().requires_grad_(), grid.clone().requires_grad_()]
    dev = [x.to("tpu").requires_grad_(), grid.to("tpu").requires_grad_()]
    before = fallback_counts()
    out_cpu, out_dev = fn(*cpu), fn(*dev)
    gout = torch.randn_like(out_cpu)
    g_cpu = torch.autograd.grad(out_cpu, cpu, gout)
    g_dev = torch.autograd.grad(out_dev, dev, gout.to("tpu"))
    for a, e in zip(g_dev, g_cpu):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-5)
    # Only the grid's gradient (the input's is not requested).
    g_grid = torch.autograd.grad(fn(x.to("tpu"), dev[1]), dev[1], gout.to("tpu"))[0]
    torch.testing.assert_close(g_grid.cpu(), g_cpu[1], rtol=1e-4, atol=1e-5)
    _no_fallback(before)


def test_grid_sample_3d_backward_opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db

    before = fallback_counts()
    for name in ("grid_sampler_3d", "nn.functional.grid_sample"):
        info = next(o for o in op_db if o.name == name)
        for s in info.sample_inputs("cpu", torch.float32, requires_grad=True):
            if s.input.dim() != 5:
                continue
            args = [a for a in s.args]
            cpu_out = info.op(s.input, *args, **s.kwargs)
            g_cpu = torch.autograd.grad(cpu_out.sum(), [s.input, args[0]])
            d_in = s.input.detach().to("tpu").requires_grad_()
            d_grid = args[0].detach().to("tpu").requires_grad_()
            dev_out = info.op(d_in, d_grid, *args[1:], **s.kwargs)
            g_dev = torch.autograd.grad(dev_out.sum(), [d_in, d_grid])
            for a, e in zip(g_dev, g_cpu):
                torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-5)
    _no_fallback(before)


# ---- multinomial's checks ----

BAD_PROBS = {
    "negative": [0.2, -0.1, 0.5],
    "inf": [0.2, float("inf"), 0.5],
    "nan": [0.2, float("nan"), 0.5],
    "zero_row": [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]],
    "inf_before_negative": [float("inf"), -1.0, 1.0],
    "zero_row_before_negative": [[0.0, 0.0], [1.0, -1.0]],
}


@pytest.mark.parametrize("replacement,k", [(False, 1), (False, 2), (True, 1), (True, 2)])
@pytest.mark.parametrize("case", sorted(BAD_PROBS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_multinomial_value_errors(case, replacement, k, dtype):
    p = torch.tensor(BAD_PROBS[case], dtype=dtype)
    _same_error(torch.multinomial, p, k, replacement)


@pytest.mark.parametrize("p,k,replacement", [
    (torch.tensor([0.2, 0.3, 0.5]), 4, False),  # more samples than categories
    (torch.tensor(1.0), 1, False),              # 0-d
    (torch.ones(2, 2, 2), 1, False),            # 3-d
    (torch.tensor([0.2, 0.8]), 0, True),        # no samples
    (torch.tensor([1, 2]), 1, False),           # integer probabilities
])
def test_multinomial_shape_errors(p, k, replacement):
    _same_error(torch.multinomial, p, k, replacement)


@pytest.mark.parametrize("replacement,k", [(False, 1), (False, 3), (True, 1), (True, 6)])
def test_multinomial_valid_input(replacement, k):
    p = torch.tensor([[0.0, 1.0, 2.0, 0.0, 3.0], [5.0, 0.0, 0.0, 1e-3, 1.0]])
    before = fallback_counts()
    got = torch.multinomial(p.to("tpu"), k, replacement)
    want = torch.multinomial(p, k, replacement)
    assert got.dtype == want.dtype and got.shape == want.shape
    got = got.cpu()
    assert bool((p.gather(1, got) > 0).all()), got  # never a zero-probability category
    if not replacement:
        assert all(len(set(r.tolist())) == k for r in got)
    # An empty batch is no error, as on the CPU (no values to check).
    assert torch.multinomial(torch.empty(0, 3, device="tpu"), 2).shape == (0, 2)
    _no_fallback(before)


# ---- _efficientzerotensor (sgn's gradient for real inputs) ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_sgn_backward_zero_tensor(dtype):
    x = make((2, 5), dtype, seed=4)
    before = fallback_counts()
    xd = x.to("tpu").requires_grad_()
    (g,) = torch.autograd.grad(torch.sgn(xd).sum(), xd)
    xc = x.clone().requires_grad_()
    (g_cpu,) = torch.autograd.grad(torch.sgn(xc).sum(), xc)
    assert g.device.type == "tpu" and g.dtype == dtype and g.shape == x.shape
    assert torch.equal(g.cpu(), g_cpu)
    assert torch.equal((g + xd).detach().cpu(), x)  # usable in ops: zeros where values are needed
    _no_fallback(before)


def test_efficientzerotensor_factory():
    before = fallback_counts()
    z = torch._efficientzerotensor((2, 3), device="tpu")
    assert z.device == torch.device("tpu:0") and z.dtype == torch.float32 and z._is_zerotensor()
    assert torch.equal(z.cpu(), torch.zeros(2, 3))
    z = torch._efficientzerotensor((4,), dtype=torch.int32, device="tpu:1")
    assert z.device == torch.device("tpu:1") and z.dtype == torch.int32
    assert torch.equal((z + torch.arange(4, dtype=torch.int32, device="tpu:1")).cpu(),
                       torch.arange(4, dtype=torch.int32))
    _no_fallback(before)


# ---- linalg.solve_ex(check_errors=True) ----

@pytest.mark.parametrize("left", [True, False])
def test_linalg_solve_ex_check_errors(left):
    A = make((2, 3, 3), torch.float32, seed=5) + 3 * torch.eye(3)
    B = make((2, 3, 2) if left else (2, 2, 3), torch.float32, seed=6)
    before = fallback_counts()
    got = torch.linalg.solve_ex(A.to("tpu"), B.to("tpu"), left=left, check_errors=True)
    want = torch.linalg.solve_ex(A, B, left=left, check_errors=True)
    for a, e in zip(got, want):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-5)
    _no_fallback(before)


def test_linalg_solve_ex_check_errors_singular():
    S = make((2, 3, 3), torch.float32, seed=7)
    S[1] = 0
    for A in (S, S[1]):
        b = make(A.shape[:-1], torch.float32, seed=8)
        _same_error(lambda a, v: torch.linalg.solve_ex(a, v, check_errors=True), A, b)
