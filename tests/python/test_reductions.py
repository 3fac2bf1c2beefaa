"""Reductions, softmax and segment_reduce on tpu against CPU PyTorch.

Every case runs the same call on CPU and tpu copies of the inputs and compares: exactly for
integer/bool results, with dtype-aware tolerances for floats, NaN positions included.
"""

import math

import pytest
import torch
import torchtpu  # noqa: F401  (registers the tpu device)
from torchtpu.testing.fallbacks import make

DEV = "tpu"

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]

# Base names (no namespace, overload or trailing underscore) of the ops lowered by the files
# these tests cover: none of them may reach the CPU fallback.
OWN_OPS = {
    "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std",
    "var_mean", "std_mean", "linalg_vector_norm", "norm", "any", "all", "logsumexp",
    "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
    "cumsum", "cumprod",
}


pytestmark = pytest.mark.usefixtures("no_own_fallback")  # conftest.py


def to_dev(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def check(fn, *inputs, atol=None, rtol=None, **kw):
    """Runs fn on CPU inputs and on tpu copies; compares every returned tensor."""
    expected = fn(*inputs, **kw)
    actual = fn(*[to_dev(x) for x in inputs], **kw)
    exp_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    act_list = list(actual) if isinstance(actual, (tuple, list)) else [actual]
    assert len(exp_list) == len(act_list)
    for e, a in zip(exp_list, act_list):
        assert a.device.type == DEV
        a = a.cpu()
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        if e.dtype.is_floating_point:
            torch.testing.assert_close(a, e, equal_nan=True, atol=atol, rtol=rtol)
        else:
            torch.testing.assert_close(a, e, atol=0, rtol=0)
    return actual


def tol(dtype):
    # Sums round differently depending on the accumulation order; half types have ~3 digits.
    if dtype == torch.bfloat16:
        return {"atol": 5e-2, "rtol": 2e-2}
    if dtype == torch.float16:
        return {"atol": 5e-3, "rtol": 5e-3}
    return {"atol": 1e-5, "rtol": 1e-5}


DIMS = [None, 0, 1, -1, (0, 1), (0, -1), (2, 0)]


# ---- sum / mean / prod ----


@pytest.mark.parametrize("dtype", ALL)
def test_sum_full(dtype):
    for shape in [(3, 5), (2, 3, 4), (), (0, 3)]:
        check(torch.sum, make(shape, dtype), **tol(dtype))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_dim(dtype, dims, keepdim):
    x = make((2, 3, 4), dtype)
    if dims is None:
        check(lambda t: torch.sum(t, dim=None, keepdim=keepdim), x, **tol(dtype))
    else:
        check(lambda t: torch.sum(t, dims, keepdim=keepdim), x, **tol(dtype))


def test_sum_dtype_and_promotion():
    x = make((4, 5), torch.int32)
    check(lambda t: torch.sum(t, 1, dtype=torch.float32), x)
    check(lambda t: torch.sum(t, dtype=torch.int64), x)
    # int32 promotes to int64; bool sums count.
    assert torch.sum(x.to(DEV)).dtype == torch.int64
    check(lambda t: torch.sum(t, 0), make((6, 3), torch.bool))
    b = make((64,), torch.bfloat16)
    check(lambda t: torch.sum(t, dtype=torch.float32), b, atol=1e-4, rtol=1e-4)


def test_sum_half_accumulates_in_f32():
    # 4096 * 1.0 is not reachable by bf16 sequential accumulation (stalls at 256).
    x = torch.ones(4096, dtype=torch.bfloat16)
    check(torch.sum, x, atol=0, rtol=0)
    check(lambda t: torch.sum(t, 0), torch.ones(2048, 2, dtype=torch.float16), atol=0, rtol=0)


def test_sum_0d_and_empty_dims():
    s = torch.tensor(3.5)
    check(lambda t: torch.sum(t, 0), s)
    check(lambda t: torch.sum(t, -1, keepdim=True), s)
    e = torch.zeros(0, 4)
    check(lambda t: torch.sum(t, 0), e)
    check(lambda t: torch.sum(t, 1), e)
    check(lambda t: torch.prod(t, 0), e)
    check(lambda t: torch.mean(t, 0), e)


def test_sum_out_and_method():
    x = make((3, 4), torch.float32)
    out = torch.empty(3, device=DEV)
    r = torch.sum(x.to(DEV), 1, out=out)
    assert r is out
    torch.testing.assert_close(out.cpu(), x.sum(1))
    # out= with a wrong size is resized like on CPU.
    out2 = torch.empty(7, device=DEV)
    torch.sum(x.to(DEV), 0, keepdim=True, out=out2)
    torch.testing.assert_close(out2.cpu(), x.sum(0, keepdim=True))
    torch.testing.assert_close(x.to(DEV).sum().cpu(), x.sum())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean(dtype, dims, keepdim):
    x = make((2, 3, 4), dtype)
    if dims is None:
        check(torch.mean, x, **tol(dtype))
    else:
        check(lambda t: torch.mean(t, dims, keepdim=keepdim), x, **tol(dtype))


def test_mean_dtype_arg():
    x = make((3, 4), torch.bfloat16)
    check(lambda t: torch.mean(t, 1, dtype=torch.float32), x)
    check(lambda t: torch.mean(t.float(), dim=[]), x)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_prod(dtype, dim):
    x = make((3, 4), dtype, low=-2, high=3)
    if dtype.is_floating_point:
        x = x.clamp(-1.5, 1.5)
    if dim is None:
        check(torch.prod, x, **tol(dtype))
    else:
        check(lambda t: torch.prod(t, dim, keepdim=dim == 1), x, **tol(dtype))


# ---- amax / amin / max / min ----


def with_nans(shape, dtype):
    x = make(shape, dtype)
    if dtype.is_floating_point:
        x.view(-1)[1] = float("nan")
        x.view(-1)[-2] = float("nan")
    return x


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", [torch.amax, torch.amin])
@pytest.mark.parametrize("dims", [(), 0, -1, (0, 1)])
def test_amax_amin(dtype, op, dims):
    x = with_nans((3, 4, 2), dtype)
    check(lambda t: op(t, dims), x)
    check(lambda t: op(t, dims, keepdim=True), x)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", [torch.max, torch.min])
def test_max_min_full(dtype, op):
    check(op, make((5, 3), dtype))
    check(op, make((), dtype))
    if dtype.is_floating_point:
        check(op, with_nans((5, 3), dtype))
        check(op, torch.tensor([-math.inf, 1.0, math.inf]).to(dtype))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", [torch.max, torch.min])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_dim(dtype, op, dim, keepdim):
    # Few distinct values, so ties are everywhere: the first index must win.
    x = make((4, 6), dtype, low=0, high=2)
    if dtype.is_floating_point:
        x = x.round()
    check(lambda t: op(t, dim, keepdim=keepdim), x)


def test_max_dim_nan_and_inf():
    x = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [-math.inf, -math.inf, 2.0, 2.0],
                      [math.inf, 0.0, math.inf, float("nan")]])
    for op in (torch.max, torch.min, torch.argmax, torch.argmin):
        check(lambda t: op(t, 1), x)
        check(lambda t: op(t, 0), x)
    check(lambda t: torch.max(t, 0), torch.tensor(2.5))
    check(lambda t: torch.min(t, -1, keepdim=True), torch.tensor(2.5))


def test_max_dim_out():
    x = make((3, 5), torch.float32)
    values = torch.empty(3, device=DEV)
    indices = torch.empty(3, dtype=torch.long, device=DEV)
    torch.max(x.to(DEV), 1, out=(values, indices))
    ev, ei = torch.max(x, 1)
    torch.testing.assert_close(values.cpu(), ev)
    torch.testing.assert_close(indices.cpu(), ei)
    out = torch.empty((), device=DEV)
    torch.amax(x.to(DEV), (0, 1), out=out)
    torch.testing.assert_close(out.cpu(), x.amax())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64])
@pytest.mark.parametrize("op", [torch.argmax, torch.argmin])
@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(dtype, op, dim, keepdim):
    x = make((3, 5, 2), dtype, low=0, high=3)
    check(lambda t: op(t, dim=dim, keepdim=keepdim), x)


def test_argmax_0d():
    check(torch.argmax, torch.tensor(1.5))
    check(lambda t: torch.argmin(t, 0, keepdim=True), torch.tensor(1.5))


# ---- var / std ----


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("correction", [0, 1, 2.5])
def test_var_std(dtype, dims, correction):
    x = make((3, 4, 5), dtype)
    for op in (torch.var, torch.std):
        check(lambda t: op(t, dims, correction=correction), x, **tol(dtype))
        check(lambda t: op(t, dims, correction=correction, keepdim=True), x, **tol(dtype))


def test_var_mean_std_mean():
    x = make((4, 6), torch.float32)
    check(lambda t: torch.var_mean(t, 1), x)
    check(lambda t: torch.std_mean(t, (0, 1), correction=0, keepdim=True), x)
    check(lambda t: torch.var(t, unbiased=False), x)
    check(lambda t: torch.std(t), x)


def test_var_degenerate():
    # One element with correction 1: divisor 0 gives NaN (0/0); correction past N gives inf.
    with pytest.warns(UserWarning):
        check(lambda t: torch.var(t, 0), torch.tensor([1.5]))
    with pytest.warns(UserWarning):
        check(lambda t: torch.var(t, correction=5), torch.tensor([1.0, 2.0]))


# ---- norms ----


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ord", [2, 1, math.inf, -math.inf, 0, 3, 0.5])
@pytest.mark.parametrize("dim", [None, 1, (0, 1)])
def test_vector_norm(dtype, ord, dim):
    x = make((3, 4), dtype)
    x[0, 1] = 0
    check(lambda t: torch.linalg.vector_norm(t, ord, dim), x, **tol(dtype))


def test_norm_variants():
    x = make((3, 4), torch.float32)
    check(lambda t: torch.linalg.vector_norm(t, 2, 1, keepdim=True), x)
    check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float32), x.to(torch.bfloat16),
          atol=1e-4, rtol=1e-4)
    check(lambda t: t.norm(), x)
    check(lambda t: t.norm(p=1, dim=0), x)
    check(lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, 3, [1]), x)
    check(lambda t: torch.ops.aten.norm.Scalar(t, 1), x)
    check(lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, None, [0], True), x)
    check(lambda t: torch.ops.aten.norm.ScalarOpt_dim_dtype(t, 2, [1], False, dtype=torch.float64),
          x)
    check(lambda t: torch.ops.aten.norm.ScalarOpt_dtype(t, math.inf, dtype=torch.float32),
          x.to(torch.bfloat16))


# ---- any / all ----


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.int32, torch.uint8])
@pytest.mark.parametrize("op", [torch.any, torch.all])
def test_any_all(dtype, op):
    x = make((3, 4), torch.int64, low=0, high=2).to(dtype)
    x[1] = 1  # one row all true
    check(op, x)
    check(lambda t: op(t, 1), x)
    check(lambda t: op(t, -2, keepdim=True), x)
    check(lambda t: op(t, (0, 1)), x)
    check(lambda t: torch.ops.aten.any.dims(t, []) if op is torch.any
          else torch.ops.aten.all.dims(t, []), x)
    check(op, torch.zeros(0, 3, dtype=dtype))
    check(lambda t: op(t, 0), torch.zeros(0, 3, dtype=dtype))


def test_any_nan_is_true():
    x = torch.tensor([0.0, float("nan")])
    check(torch.any, x)
    check(torch.all, x)


# ---- logsumexp ----


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
@pytest.mark.parametrize("dim", [0, -1, (0, 1)])
def test_logsumexp(dtype, dim):
    check(lambda t: torch.logsumexp(t, dim), make((3, 4), dtype), **tol(dtype))
    check(lambda t: torch.logsumexp(t, dim, keepdim=True), make((3, 4), dtype), **tol(dtype))


def test_logsumexp_infinities():
    x = torch.tensor([[-math.inf, -math.inf], [math.inf, 1.0], [1000.0, 1000.0]])
    check(lambda t: torch.logsumexp(t, 1), x)


# ---- cumsum / cumprod ----


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", [torch.cumsum, torch.cumprod])
def test_cumsum_cumprod(dtype, op):
    x = make((3, 5), dtype, low=-2, high=3)
    if dtype.is_floating_point:
        x = x.clamp(-1.5, 1.5)
    for dim in (0, 1, -1):
        check(lambda t: op(t, dim), x, **tol(dtype))
    check(lambda t: op(t, 0), make((), dtype))
    check(lambda t: op(t, 1), torch.zeros(2, 0, dtype=dtype))


def test_cumsum_dtype_out_inplace():
    x = make((4, 6), torch.int32)
    check(lambda t: torch.cumsum(t, 1, dtype=torch.float32), x)
    # Long scans accumulate bf16 in f32 (2048 ones stay exact).
    check(lambda t: torch.cumsum(t, 0), torch.ones(2048, dtype=torch.bfloat16), atol=0, rtol=0)
    y = make((4, 6), torch.float32)
    out = torch.empty(4, 6, device=DEV)
    torch.cumsum(y.to(DEV), 0, out=out)
    torch.testing.assert_close(out.cpu(), torch.cumsum(y, 0))
    yd = y.to(DEV)
    yd.cumsum_(1)
    torch.testing.assert_close(yd.cpu(), torch.cumsum(y, 1))


def test_empty_max_min_raise_like_cpu():
    with pytest.raises(RuntimeError, match="Expected reduction dim to be specified"):
        torch.max(torch.zeros(0, device=DEV))
    with pytest.raises((RuntimeError, IndexError), match="to have non-zero size"):
        torch.min(torch.zeros(0, 3, device=DEV), 0)


# ---- softmax ----


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax(dtype, dim, log):
    fn = torch.log_softmax if log else torch.softmax
    x = make((3, 4, 5), dtype) * 4
    check(lambda t: fn(t, dim), x, **tol(dtype))


def test_softmax_half_to_float_and_edge_cases():
    x = make((4, 5), torch.bfloat16)
    check(lambda t: torch.softmax(t, 1, dtype=torch.float32), x, atol=1e-5, rtol=1e-5)
    # half_to_float has no CPU kernel: compare with the f32 softmax of the same values.
    y = torch.ops.aten._softmax(x.half().to(DEV), 1, True)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), torch.softmax(x.half().float(), 1))
    check(lambda t: torch.log_softmax(t, 0), torch.tensor(2.0))
    check(lambda t: torch.softmax(t, 1), torch.zeros(0, 4))
    check(lambda t: torch.softmax(t, 1), torch.tensor([[-math.inf, 0.0], [1e4, -1e4]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward(dtype, log):
    fwd = torch.ops.aten._log_softmax if log else torch.ops.aten._softmax
    bwd = (torch.ops.aten._log_softmax_backward_data if log
           else torch.ops.aten._softmax_backward_data)
    x = make((3, 6), dtype)
    g = make((3, 6), dtype, seed=1)
    y = fwd(x, 1, False)
    check(lambda gg, yy: bwd(gg, yy, 1, dtype), g, y, **tol(dtype))


@pytest.mark.parametrize("log", [False, True])
def test_softmax_autograd(log):
    fn = torch.log_softmax if log else torch.softmax
    x = make((3, 5), torch.float32)
    w = make((3, 5), torch.float32, seed=2)
    grads = []
    for dev in ("cpu", DEV):
        xd = x.to(dev).detach().requires_grad_()
        (fn(xd, 1) * w.to(dev)).sum().backward()
        grads.append(xd.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


def test_reduction_autograd():
    x = make((3, 4), torch.float32)
    grads = []
    for dev in ("cpu", DEV):
        xd = x.to(dev).detach().requires_grad_()
        (xd.sum(1) * 2).sum().backward()
        grads.append(xd.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


def _close_nan(a, b, rtol=1e-4, atol=1e-5):
    """The tpu result `b` matches the CPU's `a`, NaN equal to NaN."""
    torch.testing.assert_close(b.cpu(), a, rtol=rtol, atol=atol, equal_nan=True)


# ---- segment_reduce ----

SEGMENT_REDUCTIONS = ["sum", "mean", "max", "min", "prod"]


def _segment(data, reduce, grad, **kw):
    """(output, data.grad) on CPU and tpu."""
    res = []
    for dev in ("cpu", DEV):
        d = data.detach().to(dev).requires_grad_()
        kw_dev = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        out = torch.segment_reduce(d, reduce, **kw_dev)
        out.backward(grad.to(dev))
        res.append((out, d.grad))
    return res


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("reduce", SEGMENT_REDUCTIONS)
@pytest.mark.parametrize("initial", [None, 2.0])
@pytest.mark.parametrize("use_offsets", [False, True])
def test_segment_reduce_1d(reduce, initial, use_offsets):
    torch.manual_seed(0)
    data = torch.randn(9)
    data[1] = data[0]  # a tie for max/min
    data[4] = 0.0  # a zero for prod
    lengths = torch.tensor([3, 0, 4, 1, 0])  # empty segments; one trailing element uncovered
    kw = {"initial": initial, "unsafe": True}
    if use_offsets:
        kw["offsets"] = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    else:
        kw["lengths"] = lengths
    grad = torch.randn(5)
    (a, ga), (b, gb) = _segment(data, reduce, grad, **kw)
    _close_nan(a, b)
    _close_nan(ga, gb)


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("reduce", SEGMENT_REDUCTIONS)
def test_segment_reduce_axis_and_nan(reduce):
    torch.manual_seed(1)
    data = torch.randn(4, 6, 3)
    data[1, 2, 0] = float("nan")
    data[2, 0, 1] = 0.0
    data[2, 1, 1] = 0.0
    lengths = torch.tensor([[2, 0, 4], [1, 4, 1], [6, 0, 0], [0, 2, 4]])
    grad = torch.randn(4, 3, 3)
    (a, ga), (b, gb) = _segment(data, reduce, grad, lengths=lengths, axis=1, initial=1.5)
    _close_nan(a, b)
    _close_nan(ga, gb)
    (a, ga), (b, gb) = _segment(data, reduce, grad, lengths=lengths, axis=1)
    _close_nan(a, b)
    _close_nan(ga, gb)
