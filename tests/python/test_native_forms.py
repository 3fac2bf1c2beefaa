"""Ops that had no tpu kernel (an internal assert, or the CPU fallback) and now run natively,
against the CPU: kaiser_window (eager and compiled), _add_relu (all its forms) and
matmul_backward (dense, against the CPU's autograd of matmul: the CPU itself only implements
the op for nested tensors), and out= forms that took the CPU fallback (logcumsumexp.out,
narrow_copy.out, masked_select.out)."""

from __future__ import annotations

import pytest
import torch

import torchtpu  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_cpu_fallback")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("length", [0, 1, 2, 7, 64, 300])
@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("beta", [12.0, 0.5, 0.0])
def test_kaiser_window_matches_cpu(length, periodic, beta, dtype):
    want = torch.kaiser_window(length, periodic, beta, dtype=dtype)
    got = torch.kaiser_window(length, periodic, beta, dtype=dtype, device="tpu")
    assert got.device.type == "tpu" and got.dtype == want.dtype and got.shape == want.shape
    tol = {torch.float64: 1e-12, torch.float32: 2e-6}.get(dtype, 1e-2)
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)


def test_kaiser_window_default_forms_and_dtype():
    torch.testing.assert_close(torch.kaiser_window(10, device="tpu").cpu(), torch.kaiser_window(10))
    torch.testing.assert_close(torch.kaiser_window(10, False, device="tpu").cpu(),
                               torch.kaiser_window(10, False))
    with torch.tpu.device(1):
        w = torch.kaiser_window(5, device="tpu")
    assert w.device == torch.device("tpu:1")


@pytest.mark.parametrize("call", [
    lambda d: torch.kaiser_window(-1, device=d),
    lambda d: torch.kaiser_window(5, dtype=torch.int64, device=d),
], ids=["negative_length", "integer_dtype"])
def test_kaiser_window_errors_match_cpu(call):
    with pytest.raises(RuntimeError) as cpu:
        call("cpu")
    with pytest.raises(RuntimeError) as tpu:
        call("tpu")
    # The same words up to the device the options name (cpu there, tpu here).
    assert str(tpu.value).split("device=")[0] == str(cpu.value).split("device=")[0]


def test_kaiser_window_compiled(fresh_dynamo):
    fn = torch.compile(lambda x: x * torch.kaiser_window(x.shape[0], True, 6.0, device=x.device),
                       backend="tpu")
    x = torch.randn(16)
    torch.testing.assert_close(fn(x.to("tpu")).cpu(), x * torch.kaiser_window(16, True, 6.0))


ADD_RELU_DTYPES = [torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", ADD_RELU_DTYPES)
def test_add_relu_matches_cpu(dtype):
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(64, generator=g) * 60).to(dtype)
    b = (torch.randn(64, generator=g) * 60).to(dtype)
    ta, tb = a.to("tpu"), b.to("tpu")
    for alpha in (1, 2):
        torch.testing.assert_close(torch._add_relu(ta, tb, alpha=alpha).cpu(),
                                   torch._add_relu(a, b, alpha=alpha))
    torch.testing.assert_close(torch._add_relu(ta, 3).cpu(), torch._add_relu(a, 3))
    x, tx = a.clone(), ta.clone()
    torch._add_relu_(x, b)
    torch._add_relu_(tx, tb)
    torch.testing.assert_close(tx.cpu(), x)
    out, tout = torch.empty(0, dtype=dtype), torch.empty(0, dtype=dtype, device="tpu")
    torch._add_relu(a, b, alpha=2, out=out)
    torch._add_relu(ta, tb, alpha=2, out=tout)
    torch.testing.assert_close(tout.cpu(), out)


def test_add_relu_promotes_and_clamps_like_cpu():
    # An int tensor plus a float Scalar is float; the CPU clamps inf to the largest float.
    a = torch.tensor([1, -4, 2])
    torch.testing.assert_close(torch._add_relu(a.to("tpu"), 2.5).cpu(), torch._add_relu(a, 2.5))
    f = torch.tensor([float("inf"), -1.0, 3.0] * 20)
    torch.testing.assert_close(torch._add_relu(f.to("tpu"), 1.0).cpu(), torch._add_relu(f, 1.0))
    one = torch.ones(60)
    torch.testing.assert_close(torch._add_relu(f.to("tpu"), one.to("tpu")).cpu(),
                               torch._add_relu(f, one))
    # int8 arithmetic wraps before the clamp, as on the CPU.
    i8 = torch.tensor([100, 50, -100], dtype=torch.int8)
    torch.testing.assert_close(torch._add_relu(i8.to("tpu"), i8.to("tpu"), alpha=2).cpu(),
                               torch._add_relu(i8, i8, alpha=2))


@pytest.mark.parametrize("dtype", [
    torch.float16, torch.bfloat16, torch.uint8, torch.bool,
    # No meta kernel takes complex here: the CPU fallback runs, and raises the CPU's error.
    pytest.param(torch.complex64, marks=pytest.mark.allow_fallback("aten::_add_relu.Tensor")),
])
def test_add_relu_unsupported_dtypes_raise_like_cpu(dtype):
    a = torch.ones(3, dtype=dtype)
    with pytest.raises(RuntimeError, match="Unsupported datatype for add_relu") as cpu:
        torch._add_relu(a, a)
    with pytest.raises(RuntimeError) as tpu:
        torch._add_relu(a.to("tpu"), a.to("tpu"))
    tail = str(cpu.value).split("Unsupported datatype")[1].splitlines()[0]
    assert "Unsupported datatype" + tail in str(tpu.value)
    assert torch._add_relu(torch.ones(2, device="tpu"), 1.0).cpu().tolist() == [2.0, 2.0]


SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
          ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,))]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
def test_matmul_backward_matches_cpu_autograd(sa, sb):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(sa, generator=g, requires_grad=True)
    b = torch.randn(sb, generator=g, requires_grad=True)
    out = torch.matmul(a, b)
    grad = torch.randn(out.shape, generator=g)
    ga, gb = torch.autograd.grad(out, (a, b), grad)
    ta, tb = torch.ops.aten.matmul_backward(grad.to("tpu"), a.detach().to("tpu"),
                                            b.detach().to("tpu"), [True, True])
    torch.testing.assert_close(ta.cpu(), ga, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tb.cpu(), gb, rtol=1e-5, atol=1e-5)
    only_a = torch.ops.aten.matmul_backward(grad.to("tpu"), a.detach().to("tpu"),
                                            b.detach().to("tpu"), [True, False])
    assert only_a[1] is None
    torch.testing.assert_close(only_a[0].cpu(), ga, rtol=1e-5, atol=1e-5)


def test_matmul_backward_on_cpu_is_nested_only():
    # Why the test above compares with autograd: the CPU has no dense kernel.
    a = torch.randn(2, 2)
    with pytest.raises(NotImplementedError, match="matmul_backward"):
        torch.ops.aten.matmul_backward(a, a, a, [True, True])


# ---- batch norm's out= forms (issue 18: _batch_norm_with_update.out took the CPU fallback) ----

def _bn_out_call(form, x, w, b, rm, rv, outs):
    aten = torch.ops.aten
    if form == "with_update":
        return aten._batch_norm_with_update.out(x, w, b, rm, rv, 0.1, 1e-5, out=outs[0],
                                                save_mean=outs[1], save_invstd=outs[2],
                                                reserve=outs[3])
    if form in ("legit_train", "legit_eval"):
        return aten._native_batch_norm_legit.out(x, w, b, rm, rv, form == "legit_train", 0.1,
                                                 1e-5, out=outs[0], save_mean=outs[1],
                                                 save_invstd=outs[2])
    if form in ("native_train", "native_eval"):
        return aten.native_batch_norm.out(x, w, b, rm, rv, form == "native_train", 0.1, 1e-5,
                                          out=outs[0], save_mean=outs[1], save_invstd=outs[2])
    return aten._native_batch_norm_legit.no_stats_out(x, w, b, True, 0.1, 1e-5, out=outs[0],
                                                      save_mean=outs[1], save_invstd=outs[2])


@pytest.mark.parametrize("presized", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("form", ["with_update", "legit_train", "legit_eval", "no_stats",
                                  "native_train", "native_eval"])
def test_batch_norm_out_forms_match_cpu(form, channels_last, presized):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 5, 5, generator=g)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w, b = torch.randn(3, generator=g), torch.randn(3, generator=g)
    rm, rv = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
    n = 4 if form == "with_update" else 3
    shapes = [(4, 3, 5, 5), (3,), (3,), (5,)] if presized else [(0,)] * 4
    def outs(device):
        return [torch.empty(shapes[i], device=device,
                            dtype=torch.uint8 if i == 3 else torch.float32) for i in range(n)]
    cpu_outs, layout_outs, dev_outs = outs("cpu"), outs("cpu"), outs("tpu")
    rm_d, rv_d = rm.to("tpu"), rv.to("tpu")
    # Values from the CPU on a contiguous copy of x: the CPU's out= kernels write wrong values
    # for a channels_last input into a contiguous out (they index out as if channels_last; its
    # functional forms are right). The out tensors' layout is the CPU's for x itself.
    _bn_out_call(form, x, w, b, rm.clone(), rv.clone(), layout_outs)
    _bn_out_call(form, x.contiguous(), w, b, rm, rv, cpu_outs)
    got = _bn_out_call(form, x.to("tpu"), w.to("tpu"), b.to("tpu"), rm_d, rv_d, dev_outs)
    assert all(g_ is o for g_, o in zip(got, dev_outs))  # returns its out= tensors
    for i, (d, c) in enumerate(zip(dev_outs, cpu_outs)):
        lay = layout_outs[i]
        assert d.shape == lay.shape and d.stride() == lay.stride() and d.dtype == lay.dtype
        # reserve, and the saved statistics in evaluation: left untouched on both sides.
        if i == 0 or (i < 3 and not form.endswith("_eval")):
            torch.testing.assert_close(d.cpu(), c, rtol=1e-5, atol=1e-5)
    # The running statistics are updated in place like the CPU's (or left alone).
    torch.testing.assert_close(rm_d.cpu(), rm, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rv_d.cpu(), rv, rtol=1e-6, atol=1e-6)


_BN_EVAL_FORMS = {
    "legit_functional_eval": lambda x, w, b, rm, rv: torch.ops.aten._native_batch_norm_legit_functional(
        x, w, b, rm, rv, False, 0.1, 1e-5),
    "legit_functional_train": lambda x, w, b, rm, rv: torch.ops.aten._native_batch_norm_legit_functional(
        x, w, b, rm, rv, True, 0.1, 1e-5),
    "legit_no_training": lambda x, w, b, rm, rv: torch.ops.aten._native_batch_norm_legit_no_training(
        x, w, b, rm, rv, 0.1, 1e-5),
    "no_update": lambda x, w, b, rm, rv: torch.ops.aten._batch_norm_no_update(
        x, w, b, rm, rv, 0.1, 1e-5),
}


# The CPU's _batch_norm_no_update fails without a weight (its decomposition passes None to
# _select_batch_norm_backend) and crashes without running statistics: those pairs are left out.
@pytest.mark.parametrize("form,affine", [(f, a) for f in _BN_EVAL_FORMS for a in (True, False)
                                         if f != "no_update" or a])
def test_batch_norm_functional_eval_forms_match_cpu(form, affine):
    # Issue 18: in evaluation these returned save_mean/save_invstd of shape [C] (the meta
    # functions' CUDA shape) where the CPU returns empty tensors, as native_batch_norm does.
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 5, generator=g)
    w, b = (torch.randn(3, generator=g), torch.randn(3, generator=g)) if affine else (None, None)
    rm, rv = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
    fn = _BN_EVAL_FORMS[form]
    want = fn(x, w, b, rm, rv)
    dev = lambda t: None if t is None else t.to("tpu")  # noqa: E731
    got = fn(dev(x), dev(w), dev(b), dev(rm), dev(rv))
    assert len(got) == len(want)
    for gt, wt in zip(got, want):
        assert gt.shape == wt.shape and gt.dtype == wt.dtype and gt.stride() == wt.stride()
        torch.testing.assert_close(gt.cpu(), wt, rtol=1e-5, atol=1e-5)


def test_batch_norm_eval_backward_matches_cpu():
    # The eval forms' backward reads the running statistics, not the (now empty) saved ones.
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(4, 3, 5, generator=g), torch.randn(3, generator=g), torch.randn(3, generator=g)
    rm, rv = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
    grads = []
    for d in ("cpu", "tpu"):
        xs, ws, bs = (t.clone().to(d).requires_grad_() for t in (x, w, b))
        y = torch.nn.functional.batch_norm(xs, rm.to(d), rv.to(d), ws, bs, training=False)
        (y * torch.arange(60.0).reshape(4, 3, 5).to(d)).sum().backward()
        grads.append([t.grad.cpu() for t in (xs, ws, bs)])
    for a, c in zip(grads[1], grads[0]):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5)


# ---- backward ops' out= overloads (issue 18: grid_sampler_3d_backward.out rejected `out0`,
# _adaptive_avg_pool3d_backward.out got `out` twice: PyTorch's meta registrations of those two
# cannot take their own schema's keywords) and their siblings ----
_A = torch.ops.aten
_LONG0 = lambda shape, d: torch.zeros(shape, dtype=torch.long, device=d)  # noqa: E731
BACKWARD_OUT = {
    "grid_sampler_3d_backward.out": (lambda d, o: _A.grid_sampler_3d_backward.out(
        *d, 0, 0, False, [True, True], out0=o[0], out1=o[1]),
        [(1, 1, 2, 2, 2), (1, 1, 3, 3, 3), (1, 2, 2, 2, 3)], 2),
    "grid_sampler_2d_backward.out": (lambda d, o: _A.grid_sampler_2d_backward.out(
        *d, 0, 0, False, [True, True], out0=o[0], out1=o[1]),
        [(1, 1, 2, 2), (1, 1, 3, 3), (1, 2, 2, 2)], 2),
    "_adaptive_avg_pool3d_backward.out": (lambda d, o: _A._adaptive_avg_pool3d_backward.out(
        *d, out=o[0]), [(1, 2, 2, 2, 2), (1, 2, 4, 4, 4)], 1),
    "_adaptive_avg_pool2d_backward.out": (lambda d, o: _A._adaptive_avg_pool2d_backward.out(
        *d, out=o[0]), [(1, 2, 2, 2), (1, 2, 4, 4)], 1),
    "adaptive_max_pool2d_backward.grad_input": (
        lambda d, o: _A.adaptive_max_pool2d_backward.grad_input(
            d[0], d[1], _LONG0((1, 2, 2, 2), d[0].device), grad_input=o[0]),
        [(1, 2, 2, 2), (1, 2, 4, 4)], 1),
    "avg_pool3d_backward.grad_input": (lambda d, o: _A.avg_pool3d_backward.grad_input(
        *d, [2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, None, grad_input=o[0]),
        [(1, 2, 2, 2, 2), (1, 2, 4, 4, 4)], 1),
    "upsample_nearest3d_backward.grad_input": (
        lambda d, o: _A.upsample_nearest3d_backward.grad_input(
            d[0], [4, 4, 4], [1, 2, 2, 2, 2], None, None, None, grad_input=o[0]),
        [(1, 2, 4, 4, 4)], 1),
    "reflection_pad3d_backward.grad_input": (
        lambda d, o: _A.reflection_pad3d_backward.grad_input(d[0], d[1], [1] * 6,
                                                             grad_input=o[0]),
        [(1, 1, 4, 4, 4), (1, 1, 2, 2, 2)], 1),
    "max_pool3d_with_indices_backward.grad_input": (
        lambda d, o: _A.max_pool3d_with_indices_backward.grad_input(
            d[0], d[1], [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False,
            _LONG0((1, 2, 2, 2, 2), d[0].device), grad_input=o[0]),
        [(1, 2, 2, 2, 2), (1, 2, 4, 4, 4)], 1),
    "col2im.out": (lambda d, o: _A.col2im.out(d[0], [5, 5], [2, 2], [1, 1], [0, 0], [1, 1],
                                              out=o[0]), [(1, 8, 16)], 1),
}


@pytest.mark.parametrize("name", BACKWARD_OUT)
def test_backward_out_overloads_match_cpu(name):
    fn, shapes, n = BACKWARD_OUT[name]
    g = torch.Generator().manual_seed(0)
    ins = [torch.randn(s, generator=g) for s in shapes]
    want = [torch.empty(0) for _ in range(n)]
    fn(ins, want)
    got = [torch.empty(0, device="tpu") for _ in range(n)]
    fn([t.to("tpu") for t in ins], got)
    for d, c in zip(got, want):
        assert d.shape == c.shape and d.stride() == c.stride()
        torch.testing.assert_close(d.cpu(), c, rtol=1e-5, atol=1e-5)


# ---- _embedding_bag's extra outputs (issue 18: other shapes than on the CPU) ----

@pytest.mark.parametrize("op", ["_embedding_bag", "_embedding_bag_forward_only"])
@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sum", "mean", "max"])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [-1, 4])
def test_embedding_bag_extra_outputs_match_cpu(op, mode, include_last_offset, padding_idx):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(10, 3, generator=g)
    idx, off = torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2, 5, 6])
    psw = torch.rand(6, generator=g) if mode == 0 else None
    fn = getattr(torch.ops.aten, op)
    want = fn(w, idx, off, False, mode, False, psw, include_last_offset, padding_idx)
    got = fn(w.to("tpu"), idx.to("tpu"), off.to("tpu"), False, mode, False,
             None if psw is None else psw.to("tpu"), include_last_offset, padding_idx)
    torch.testing.assert_close(got[0].cpu(), want[0])
    for d, c in zip(got[1:], want[1:]):
        assert d.dtype == c.dtype and d.shape == c.shape, (d.shape, c.shape)
        assert torch.equal(d.cpu(), c), (d.cpu(), c)


@pytest.mark.parametrize("offsets", [[0, 2, 5], [0, 2, 2, 7]], ids=["full", "empty_bags"])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_gradients_still_match_cpu(mode, offsets):
    from conftest import check_forward_backward

    g = torch.Generator().manual_seed(1)
    idx, off = torch.tensor([1, 2, 4, 5, 4, 3, 9]), torch.tensor(offsets)
    check_forward_backward(
        lambda w, i, o: torch.nn.functional.embedding_bag(i, w, o, mode=mode),
        [torch.randn(10, 3, generator=g), idx, off], grad_args=(0,))


# ---- issue 18 items found right on re-checking (tests so they stay right) ----

@pytest.mark.parametrize("n,m,dtype,size", [(3, 4, torch.float32, (3, 4)), (3, 4, torch.float32, (0,)),
                                            (3, 2, torch.int32, (3, 2)), (3, 3, torch.bool, (3, 3)),
                                            (0, 3, torch.float32, (3, 3))])
def test_eye_m_out_matches_cpu(n, m, dtype, size):
    want = torch.eye(n, m, out=torch.empty(size, dtype=dtype))
    out = torch.empty(size, dtype=dtype, device="tpu")
    got = torch.eye(n, m, out=out)
    assert got is out and got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("psw", [False, True])
@pytest.mark.parametrize("padding_idx", [-1, 4])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_backward_forms_match_cpu(mode, psw, padding_idx, include_last_offset):
    # _embedding_bag_backward called directly with the forward's extra outputs (issue 18: some
    # argument combinations were reported failing to lower). scale_grad_by_freq is covered by
    # test_embedding_bag_freq.py (the CPU's own kernel is wrong there).
    if psw and mode != 0:
        return  # per_sample_weights is sum-only on the CPU as well
    g = torch.Generator().manual_seed(0)
    w = torch.randn(10, 3, generator=g)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    off = torch.tensor([0, 4, 4, 8] if include_last_offset else [0, 4, 4])
    p = torch.rand(8, generator=g) if psw else None
    res = []
    for d in ("cpu", "tpu"):
        dv = lambda t: None if t is None else t.to(d)  # noqa: E731
        out, o2b, bs, mi = torch.ops.aten._embedding_bag(dv(w), dv(idx), dv(off), False, mode,
                                                         False, dv(p), include_last_offset,
                                                         padding_idx)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(d)
        gw = torch.ops.aten._embedding_bag_backward(grad, dv(idx), dv(off), o2b, bs, mi, 10,
                                                    False, mode, False, dv(p), padding_idx)
        res.append((out.cpu(), gw.cpu()))
    for a, b in zip(res[1], res[0]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_vander_backward_matches_cpu():
    # linalg.vander's gradient matches; torch.vander's backward raises the same version-counter
    # error on the CPU (its composite writes in place into a tensor autograd saved), so tpu
    # matching it there is the CPU's behavior, not ours.
    for x in (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[1.0, 2.0], [3.0, -1.0]])):
        grads = []
        for d in ("cpu", "tpu"):
            v = x.clone().to(d).requires_grad_()
            y = torch.linalg.vander(v, N=4)
            (y * torch.arange(y.numel(), dtype=y.dtype).view(y.shape).to(d)).sum().backward()
            grads.append((y.detach().cpu(), v.grad.cpu()))
        for a, b in zip(grads[1], grads[0]):
            torch.testing.assert_close(a, b)
    for d in ("cpu", "tpu"):
        v = torch.tensor([1.0, 2.0, 3.0], device=d, requires_grad=True)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.vander(v, N=4).sum().backward()


def test_saturate_weight_to_fp16_matches_cpu():
    # The CPU kernel clamps weight.contiguous() to the float16 range through a raw host pointer
    # and returns `weight` (so a contiguous weight is saturated in place); on tpu that pointer
    # is no host memory and the op returned its input unsaturated. A 0-d or 1-d weight (issue 18
    # reported the 0-d one) fails on the CPU too, with the same error.
    from conftest import assert_same_error
    assert_same_error(torch.ops.aten._saturate_weight_to_fp16, torch.tensor(1e6))
    assert_same_error(torch.ops.aten._saturate_weight_to_fp16, torch.tensor([1e6, 2.0]))
    for w in (torch.tensor([[1e6, -1e6], [3.0, 70000.0]]), torch.tensor([[NAN_, 1.0]]),
              torch.full((2, 2, 2), 1e5), torch.tensor([[1e6, 2.0], [3.0, 4.0]]).t()):
        cpu, dev = w.clone(), w.to("tpu")
        want, got = torch.ops.aten._saturate_weight_to_fp16(cpu), \
            torch.ops.aten._saturate_weight_to_fp16(dev)
        assert got is dev and want is cpu
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
        torch.testing.assert_close(dev.cpu(), cpu, equal_nan=True)  # in place, or not, alike


NAN_ = float("nan")


# ---- out= forms that took the CPU fallback (issue 18 leftovers) ----
# logcumsumexp.out (through _logcumsumexp.out, which had no meta kernel), narrow_copy.out (its
# functional form is a composite, so the out= path found no lowering) and masked_select.out
# (a data-dependent size): all native now, written into `out` as the CPU writes it.

def _resize_warned(fn):
    import warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = fn()
    return r, any("was resized" in str(w.message) for w in seen)


def _out_cases(shape, dtype):
    """(name, make(device)) pairs: a fresh empty out, an out of the result's shape (written in
    place, so a view of it sees the result), a non-empty out of another shape (resized, with
    the CPU's warning or not) and a non-contiguous out of the result's shape."""
    n = 1
    for s in shape:
        n *= s
    return [
        ("empty", lambda d: torch.empty(0, dtype=dtype, device=d)),
        ("same_shape", lambda d: torch.zeros(shape, dtype=dtype, device=d)),
        ("other_shape", lambda d: torch.zeros(n + 3, dtype=dtype, device=d)),
        ("strided", lambda d: torch.zeros(tuple(shape[:-1]) + (2 * shape[-1],), dtype=dtype,
                                          device=d)[..., ::2] if shape and shape[-1] else None),
    ]


def _check_out_form(fn, inputs, result_shape, dtype, out_case):
    name, make = next(c for c in _out_cases(result_shape, dtype) if c[0] == out_case)
    cpu_out, tpu_out = make("cpu"), make("tpu")
    if cpu_out is None:
        return
    tpu_alias = tpu_out.view(-1) if tpu_out.is_contiguous() else None
    want, cpu_warned = _resize_warned(lambda: fn(*inputs, out=cpu_out))
    got, tpu_warned = _resize_warned(lambda: fn(*[t.to("tpu") for t in inputs], out=tpu_out))
    assert got is tpu_out and want is cpu_out
    assert tpu_warned == cpu_warned, (tpu_warned, cpu_warned)
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    if tpu_alias is not None and got.numel() == tpu_alias.numel():
        torch.testing.assert_close(tpu_alias.cpu(), want.reshape(-1), equal_nan=True)


OUT_CASES = ["empty", "same_shape", "other_shape", "strided"]


@pytest.mark.parametrize("out_case", OUT_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_logcumsumexp_out_is_native(dim, dtype, out_case):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3)).to(dtype)
    x[1, 2], x[2, 0] = float("-inf"), float("inf")
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype)
    fn = lambda t, out: torch.logcumsumexp(t, dim, out=out)  # noqa: E731
    if tol is None:
        _check_out_form(fn, [x], x.shape, dtype, out_case)
    else:
        want = torch.logcumsumexp(x.float(), dim).to(dtype)  # the CPU's half kernels: opmath
        got = torch.logcumsumexp(x.to("tpu"), dim, out=torch.empty(0, dtype=dtype, device="tpu"))
        torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
    # _logcumsumexp.out, which the public out= form calls, directly too (0-d included).
    for t in (x, x[0, 0]):
        got = torch.ops.aten._logcumsumexp.out(t.to("tpu"), 0,
                                               out=torch.empty(0, dtype=dtype, device="tpu"))
        torch.testing.assert_close(got.cpu(), torch.ops.aten._logcumsumexp(t, 0),
                                   rtol=tol, atol=tol)


@pytest.mark.parametrize("out_case", OUT_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("dim,start,length", [(0, 1, 2), (1, -3, 3), (1, 5, 0), (-1, 0, 5),
                                              (0, -4, 4)])
def test_narrow_copy_out_is_native(dim, start, length, dtype, out_case):
    x = torch.arange(20).reshape(4, 5).to(dtype)
    shape = list(x.shape)
    shape[dim] = length
    if out_case == "strided":
        # The CPU kernel fills a non-contiguous out as if it were contiguous (its elements land
        # elsewhere), so the oracle is the op's definition, narrow().clone(), on the CPU.
        out = torch.zeros(shape[0], 2 * shape[1], dtype=dtype, device="tpu")[:, ::2]
        got = torch.narrow_copy(x.to("tpu"), dim, start, length, out=out)
        assert got is out
        torch.testing.assert_close(out.cpu(), x.narrow(dim, start, length).clone())
        return
    _check_out_form(lambda t, out: torch.narrow_copy(t, dim, start, length, out=out), [x],
                    shape, dtype, out_case)
    # A non-contiguous input, read through its strides.
    xt = x.t()
    _check_out_form(lambda t, out: torch.narrow_copy(t, 0, 1, 3, out=out), [xt],
                    [3, 4], dtype, "empty")


@pytest.mark.parametrize("out_case", ["empty", "same_shape", "other_shape"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.complex64])
@pytest.mark.parametrize("form", ["same", "mask_row", "self_row", "none", "all"])
def test_masked_select_out_is_native(form, dtype, out_case):
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(4, 5, generator=g) * 4).to(dtype)
    mask = torch.rand(4, 5, generator=g) > 0.5
    x, mask = {"same": (x, mask), "mask_row": (x, mask[1]), "self_row": (x[2], mask),
               "none": (x, torch.zeros_like(mask)), "all": (x, torch.ones_like(mask))}[form]
    n = int(torch.masked_select(x, mask).numel())
    _check_out_form(lambda t, m, out: torch.masked_select(t, m, out=out), [x, mask], [n], dtype,
                    out_case)


@pytest.mark.parametrize("call", [
    lambda t: torch.narrow_copy(t, 1, 1, 3, out=torch.empty(0, dtype=torch.float64,
                                                             device=t.device)),
    lambda t: torch.narrow_copy(t.sum(), 0, 0, 1, out=torch.empty(0, device=t.device)),
    lambda t: torch.narrow_copy(t, 1, 7, 1, out=torch.empty(0, device=t.device)),
    lambda t: torch.narrow_copy(t, 1, -6, 1, out=torch.empty(0, device=t.device)),
    lambda t: torch.narrow_copy(t, 1, 2, 4, out=torch.empty(0, device=t.device)),
    lambda t: torch.narrow_copy(t, 1, 2, -1, out=torch.empty(0, device=t.device)),
    lambda t: torch.narrow_copy(t, 2, 0, 1, out=torch.empty(0, device=t.device)),
    lambda t: torch.narrow_copy(t, -3, 0, 1, out=torch.empty(0, device=t.device)),
    lambda t: torch.logcumsumexp(t, 1, out=torch.empty(0, dtype=torch.float64, device=t.device)),
    lambda t: torch.logcumsumexp(t.long(), 1, out=torch.empty(0, device=t.device)),
    lambda t: torch.logcumsumexp(t, 2, out=torch.empty(0, device=t.device)),
    lambda t: torch.logcumsumexp(t, -3),
    lambda t: torch.masked_select(t, t > 0, out=torch.empty(0, dtype=torch.float64,
                                                            device=t.device)),
    lambda t: torch.masked_select(t, (t > 0).to(torch.uint8), out=torch.empty(0, device=t.device)),
    lambda t: torch.masked_select(t, torch.ones(3, dtype=torch.bool, device=t.device),
                                  out=torch.empty(0, device=t.device)),
    lambda t: torch.masked_select(t, torch.ones(3, dtype=torch.bool, device=t.device)),
    lambda t: torch.masked_select(t, t > -100, out=t),
    lambda t: (lambda m: torch.masked_select(t, m, out=m))(t > 0),
], ids=["nc_dtype", "nc_0d", "nc_start", "nc_neg_start", "nc_length", "nc_neg_length", "nc_dim",
        "nc_neg_dim", "lcse_dtype", "lcse_int_to_float", "lcse_dim", "lcse_functional_dim",
        "ms_dtype", "ms_uint8_mask", "ms_broadcast", "ms_functional_broadcast", "ms_overlap_self",
        "ms_overlap_mask"])
def test_out_forms_bad_input_raise_like_cpu(call):
    from conftest import assert_same_error
    assert_same_error(call, torch.randn(4, 5, generator=torch.Generator().manual_seed(5)))


def test_direct_logcumsumexp_out_of_another_dtype_raises():
    # The CPU's _logcumsumexp.out writes self's dtype into out's memory whatever out's dtype is
    # (a float64 out of a float32 input reads as garbage and corrupts the CPU heap), so it is no
    # oracle here: tpu raises what the public logcumsumexp.out raises for that out.
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError) as public:
        torch.logcumsumexp(x, 1, out=torch.empty(0, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=str(public.value).splitlines()[0]):
        torch.ops.aten._logcumsumexp.out(x.to("tpu"), 1,
                                         out=torch.empty(0, dtype=torch.float64, device="tpu"))


def test_out_forms_report_no_fallback_in_the_metrics():
    from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

    x = torch.randn(4, 5, device="tpu")
    before = fallback_counts()
    torch.logcumsumexp(x, 1, out=torch.empty(0, device="tpu"))
    torch.narrow_copy(x, 1, 1, 3, out=torch.empty(0, device="tpu"))
    torch.masked_select(x, x > 0, out=torch.empty(0, device="tpu"))
    grown = new_fallbacks(before)
    for op in ("aten::_logcumsumexp.out", "aten::logcumsumexp.out", "aten::narrow_copy.out",
               "aten::masked_select.out"):
        assert op not in grown


# ---- batch norm's statistics in the CPU's dtypes (issue 32) ----
# The CPU returns save_mean/save_invstd and the new running statistics in the input's dtype, or in
# float32 when a half-precision input comes with float32 parameters ("mixed"), and refuses other
# mixes; PyTorch's meta kernels (and CUDA) say float32 for every half-precision input, and tpu
# followed them (_native_batch_norm_legit_functional on bfloat16 gave float32 outputs 1-4).
_A_BN = torch.ops.aten
_BN_FORMS = {
    "legit_functional": lambda x, w, b, rm, rv, tr: _A_BN._native_batch_norm_legit_functional(
        x, w, b, rm, rv, tr, 0.1, 1e-5),
    "native_batch_norm": lambda x, w, b, rm, rv, tr: _A_BN.native_batch_norm(
        x, w, b, rm, rv, tr, 0.1, 1e-5),
    "native_batch_norm_no_stats": lambda x, w, b, rm, rv, tr: _A_BN.native_batch_norm(
        x, w, b, None, None, True, 0.1, 1e-5),
    "legit": lambda x, w, b, rm, rv, tr: _A_BN._native_batch_norm_legit(
        x, w, b, rm, rv, tr, 0.1, 1e-5),
    "legit_no_stats": lambda x, w, b, rm, rv, tr: _A_BN._native_batch_norm_legit(
        x, w, b, True, 0.1, 1e-5),
    "legit_no_training": lambda x, w, b, rm, rv, tr: _A_BN._native_batch_norm_legit_no_training(
        x, w, b, rm, rv, 0.1, 1e-5),
    "with_update": lambda x, w, b, rm, rv, tr: _A_BN._batch_norm_with_update(
        x, w, b, rm, rv, 0.1, 1e-5),
    "with_update_functional": lambda x, w, b, rm, rv, tr: _A_BN._batch_norm_with_update_functional(
        x, w, b, rm, rv, 0.1, 1e-5),
    # (without running statistics the CPU's _batch_norm_no_update crashes the process: left out)
    "no_update": lambda x, w, b, rm, rv, tr: _A_BN._batch_norm_no_update(x, w, b, rm, rv, 0.1,
                                                                         1e-5),
}


@pytest.mark.parametrize("params", ["same", "float32", "none"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64],
                         ids=str)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("form", sorted(_BN_FORMS))
def test_batch_norm_statistics_take_the_cpus_dtypes(form, training, dtype, params):
    import warnings

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 4, 4, generator=g).to(dtype)
    pd = {"same": dtype, "float32": torch.float32, "none": dtype}[params]
    w = None if params == "none" else (torch.rand(3, generator=g) + 0.5).to(pd)
    b = None if params == "none" else torch.randn(3, generator=g).to(pd)
    rm, rv = torch.randn(3, generator=g).to(pd), (torch.rand(3, generator=g) + 0.5).to(pd)
    fn = _BN_FORMS[form]
    cpu_args = [x, w, b, rm.clone(), rv.clone()]
    dev_args = [None if t is None else t.to("tpu") for t in (x, w, b, rm, rv)]
    try:
        want = fn(*cpu_args, training)
    except RuntimeError as e:  # the CPU's mixed-dtype checks (float64 input, float32 stats)
        with pytest.raises(RuntimeError, match=str(e).splitlines()[0].replace("(", r"\(")
                           .replace(")", r"\)")):
            fn(*dev_args, training)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fn(*dev_args, training)
    assert len(got) == len(want)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype in (torch.bfloat16, torch.float16) else {}
    for gt, wt in zip(got, want):
        assert gt.dtype == wt.dtype and gt.shape == wt.shape, (gt.dtype, wt.dtype, gt.shape)
        torch.testing.assert_close(gt.cpu(), wt, **tol)
    # Running statistics updated in place like the CPU's (or left alone).
    torch.testing.assert_close(dev_args[3].cpu(), cpu_args[3], **tol)
    torch.testing.assert_close(dev_args[4].cpu(), cpu_args[4], **tol)


# ---- _embedding_bag's offset2bag on the CPU's slow path (issue 32) ----

@pytest.mark.parametrize("psw", [None, "contiguous", "strided"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=str)
@pytest.mark.parametrize("op", ["_embedding_bag", "_embedding_bag_forward_only"])
def test_embedding_bag_sum_offset2bag_follows_the_cpus_fast_path(op, dtype, layout, psw):
    # In "sum" mode the CPU leaves offset2bag empty only on its fast path (a float/half/bfloat16
    # weight with unit stride along the embedding, unit-stride per-sample weights, no
    # padding_idx); otherwise it holds each index's bag. tpu gave (0,) for a float64 or
    # transposed weight where the CPU gives (4,).
    g = torch.Generator().manual_seed(0)
    w = torch.randn(10, 3, generator=g).to(dtype)
    if layout == "transposed":
        w = w.t().contiguous().t()
    idx, off = torch.tensor([1, 2, 4, 5]), torch.tensor([0, 2])
    p = p_dev = None
    if psw is not None:
        full = torch.rand(8, generator=g).to(dtype)
        if psw == "strided":  # a view with stride 2 on both devices
            p, p_dev = full[::2], full.to("tpu")[::2]
        else:
            p = full[:4].contiguous()
            p_dev = p.to("tpu")
    fn = getattr(torch.ops.aten, op)
    want = fn(w, idx, off, False, 0, False, p, False, -1)
    got = fn(w.to("tpu"), idx.to("tpu"), off.to("tpu"), False, 0, False, p_dev, False, -1)
    assert w.to("tpu").stride() == w.stride()
    tol = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
    torch.testing.assert_close(got[0].cpu(), want[0], **tol)
    for d, c in zip(got[1:], want[1:]):
        assert d.dtype == c.dtype and d.shape == c.shape, (d.shape, c.shape)
        assert torch.equal(d.cpu(), c)


# ---- aten::_convolution called directly (issue 32: "convolution_overrideable not
# implemented"; F.conv2d goes through aten::convolution) ----

@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_underscore_convolution_called_directly_matches_cpu(nd, transposed):
    from conftest import check_forward_backward

    g = torch.Generator().manual_seed(nd)
    x = torch.randn(2, 4, *([6] * nd), generator=g)
    w = torch.randn(*((4, 3) if transposed else (3, 4)), *([3] * nd), generator=g)
    bias = torch.randn(3, generator=g)
    one, zero = [1] * nd, [0] * nd
    stride = [2] * nd if transposed else one

    def conv(x, w, bias):
        return torch.ops.aten._convolution(x, w, bias, stride, one, one, transposed, zero, 1,
                                           False, False, True, True)

    check_forward_backward(conv, [x, w, bias], grad_args=(0, 1, 2), rtol=1e-4, atol=1e-4)
    # And with the CPU's argument checks, at the call.
    with pytest.raises(RuntimeError, match="negative padding is not supported"):
        torch.ops.aten._convolution(x.to("tpu"), w.to("tpu"), None, one, [-1] * nd, one,
                                    transposed, zero, 1, False, False, True, True)


# ---- im2col / col2im with out= aliasing the input (issue 32) ----

@pytest.mark.parametrize("op", ["im2col", "col2im"])
def test_fold_unfold_out_may_be_the_input(op):
    # torch.ops.aten.im2col.out(a, ..., out=a): the generic out= path resized the out tensor,
    # and with it the input it aliases, before building the program, which then failed. The
    # result is the functional form's. (The CPU's own kernel writes the output into the memory
    # it is still reading: its result for this call is partly garbage, ~35% of the elements for
    # a 1x2x4x4 input, so it is no oracle.)
    g = torch.Generator().manual_seed(0)
    if op == "im2col":
        a = torch.randn(1, 2, 4, 4, generator=g)
        args = ([2, 2], [1, 1], [0, 0], [1, 1])
    else:
        a = torch.randn(1, 8, 9, generator=g)
        args = ([4, 4], [2, 2], [1, 1], [0, 0], [1, 1])
    want = getattr(torch.ops.aten, op)(a, *args)
    t = a.to("tpu")
    r = getattr(torch.ops.aten, op).out(t, *args, out=t)
    assert r is t
    assert t.shape == want.shape
    torch.testing.assert_close(t.cpu(), want)
