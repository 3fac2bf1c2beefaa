"""NN ops on tpu against CPU PyTorch: convolution, pooling, normalization, dropout, embedding
and embedding_bag, unfold/fold, upsampling and edge padding, rrelu (eval exact, training draws
noise from the tpu generator), fractional max pooling given the same random_samples, forward and
the backward ops autograd calls, plus a small CNN.

Every test checks that no op ran through the CPU fallback (conftest's no_cpu_fallback fixture).
Shapes are small: each new signature compiles one program.
"""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


DEV = "tpu"


pytestmark = pytest.mark.usefixtures("no_cpu_fallback")


def _check(fn, *inputs, atol=1e-5, rtol=1.3e-6, grad=True, **kwargs):
    """Runs fn on CPU and tpu copies of `inputs` (None entries pass through), compares the
    outputs and, when `grad`, the gradients of every floating input for a random cotangent."""
    torch.manual_seed(0)

    def prep(t, device):
        if t is None:
            return None
        t = t.detach().to(device)
        if grad and t.is_floating_point():
            t.requires_grad_()
        return t

    cpu = [prep(t, "cpu") for t in inputs]
    tpu = [prep(t, DEV) for t in inputs]
    out_c = fn(*cpu, **kwargs)
    out_t = fn(*tpu, **kwargs)
    outs_c = out_c if isinstance(out_c, tuple) else (out_c,)
    outs_t = out_t if isinstance(out_t, tuple) else (out_t,)
    for c, t in zip(outs_c, outs_t):
        assert t.device.type == DEV and t.dtype == c.dtype and t.shape == c.shape
        torch.testing.assert_close(t.cpu(), c, atol=atol, rtol=rtol)
    if not grad:
        return
    cot = torch.randn(outs_c[0].shape, dtype=outs_c[0].dtype)
    outs_c[0].backward(cot)
    outs_t[0].backward(cot.to(DEV))
    for c, t in zip(cpu, tpu):
        if c is not None and c.requires_grad:
            assert t.grad is not None
            torch.testing.assert_close(t.grad.cpu(), c.grad, atol=atol, rtol=rtol)


# ---- convolution ----

CONV_CASES = [
    # (input shape, weight shape, bias, kwargs)
    ((2, 4, 7, 7), (6, 4, 3, 3), True, {}),
    ((2, 4, 9, 8), (6, 2, 3, 2), True, dict(stride=2, padding=1, dilation=2, groups=2)),
    ((2, 4, 8, 8), (4, 1, 3, 3), False, dict(padding="same", groups=4)),
    ((2, 4, 9), (6, 2, 3), False, dict(stride=3, padding=2, groups=2)),
    ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), True, dict(stride=(1, 2, 1), padding=(1, 0, 1))),
    ((4, 6, 6), (5, 4, 3, 3), True, dict(padding=1)),  # unbatched
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_conv(case):
    x, w, bias, kw = case
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(w)]
    b = torch.randn(w[0]) if bias else None
    _check(conv, torch.randn(x), torch.randn(w), b, atol=1e-4, rtol=1e-4, **kw)


CONV_T_CASES = [
    ((2, 4, 5, 5), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ((2, 4, 5, 5), (4, 3, 3, 2),
     dict(stride=(2, 3), padding=(2, 1), output_padding=(1, 2), groups=2, dilation=(1, 2))),
    ((2, 4, 5), (4, 3, 3), dict(padding=2)),
    ((1, 2, 3, 3, 3), (2, 2, 2, 2, 2), dict(stride=2)),
    # output_padding >= stride (allowed below the dilation): grad_input ignores the last rows
    ((2, 2, 4, 4), (2, 2, 4, 5),
     dict(stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2, dilation=(4, 4))),
]


@pytest.mark.parametrize("case", CONV_T_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_conv_transpose(case):
    x, w, kw = case
    conv = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(w)]
    groups = kw.get("groups", 1)
    _check(conv, torch.randn(x), torch.randn(w), torch.randn(w[1] * groups), atol=1e-4,
           rtol=1e-4, **kw)


def test_conv_backward_masks():
    # Input without grad (the first layer) and no bias: only grad_weight is requested.
    x = torch.randn(2, 3, 6, 6)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    wt = w.detach().to(DEV).requires_grad_()
    F.conv2d(x, w, stride=2).pow(2).sum().backward()
    F.conv2d(x.to(DEV), wt, stride=2).pow(2).sum().backward()
    torch.testing.assert_close(wt.grad.cpu(), w.grad, atol=1e-4, rtol=1e-4)
    # Only grad_input.
    xg = x.clone().requires_grad_()
    xt = x.to(DEV).requires_grad_()
    F.conv2d(xg, w.detach(), padding=1).sum().backward()
    F.conv2d(xt, wt.detach(), padding=1).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xg.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv_half_accumulates_in_f32(dtype):
    x, w, b = torch.randn(2, 4, 9, 9), torch.randn(6, 2, 3, 3), torch.randn(6)
    out = F.conv2d(x.to(dtype).to(DEV), w.to(dtype).to(DEV), b.to(dtype).to(DEV), stride=2,
                   padding=1, groups=2)
    assert out.dtype == dtype
    ref = F.conv2d(x.to(dtype).float(), w.to(dtype).float(), b.to(dtype).float(), stride=2,
                   padding=1, groups=2).to(dtype)
    torch.testing.assert_close(out.cpu(), ref)


# ---- pooling ----

POOL_CASES = [
    (F.max_pool2d, (2, 3, 8, 8), dict(kernel_size=2)),
    (F.max_pool2d, (2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1, return_indices=True)),
    (F.max_pool2d, (2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1, dilation=2,
                                      ceil_mode=True)),
    (F.max_pool2d, (3, 9, 7), dict(kernel_size=(3, 2), stride=(2, 1), ceil_mode=True)),
    (F.max_pool1d, (2, 3, 9), dict(kernel_size=3, stride=2, return_indices=True)),
    (F.max_pool3d, (1, 2, 5, 6, 5), dict(kernel_size=2, stride=2, ceil_mode=True)),
    (F.avg_pool2d, (2, 3, 8, 8), dict(kernel_size=2)),
    (F.avg_pool2d, (2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (F.avg_pool2d, (2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                      count_include_pad=False)),
    (F.avg_pool2d, (2, 3, 10, 7), dict(kernel_size=(4, 3), stride=(3, 2), padding=(2, 1),
                                       ceil_mode=True)),
    (F.avg_pool2d, (2, 3, 9, 7), dict(kernel_size=3, divisor_override=5)),
    (F.avg_pool1d, (2, 3, 9), dict(kernel_size=3, stride=2, padding=1)),
    (F.avg_pool3d, (1, 2, 5, 6, 5), dict(kernel_size=2, stride=2, ceil_mode=True)),
    (F.adaptive_avg_pool2d, (2, 3, 8, 8), dict(output_size=1)),
    (F.adaptive_avg_pool2d, (2, 3, 7, 9), dict(output_size=(3, 4))),
    (F.adaptive_avg_pool1d, (2, 3, 7), dict(output_size=3)),
    (F.adaptive_avg_pool3d, (1, 2, 5, 6, 7), dict(output_size=(2, 3, 4))),
    (F.adaptive_max_pool2d, (2, 3, 7, 9), dict(output_size=(3, 4), return_indices=True)),
    (F.adaptive_max_pool1d, (2, 3, 7), dict(output_size=3)),
]


@pytest.mark.parametrize("case", POOL_CASES,
                         ids=lambda c: c[0].__name__ + "-" + "x".join(map(str, c[1])))
def test_pool(case):
    fn, shape, kw = case
    _check(fn, torch.randn(shape), **kw)


def test_max_pool_ties_and_nan_pick_like_cpu():
    x = torch.tensor([[[[1.0, 1.0, 0.0, 2.0], [1.0, 0.5, 2.0, 2.0],
                        [float("nan"), 0.0, 3.0, float("nan")], [0.0, 4.0, 3.0, 1.0]]]])
    out, idx = F.max_pool2d(x.to(DEV), 2, return_indices=True)
    ref, ref_idx = F.max_pool2d(x, 2, return_indices=True)
    torch.testing.assert_close(out.cpu(), ref, equal_nan=True)
    assert torch.equal(idx.cpu(), ref_idx)


def test_max_unpool():
    x = torch.randn(1, 2, 5, 6)
    y, idx = F.max_pool2d(x, 2, return_indices=True)
    _check(lambda t: F.max_unpool2d(t, idx.to(t.device), 2, output_size=(5, 6)), y)
    x3 = torch.randn(1, 2, 4, 4, 4)
    y3, idx3 = F.max_pool3d(x3, 2, return_indices=True)
    _check(lambda t: F.max_unpool3d(t, idx3.to(t.device), 2), y3)


# ---- normalization ----


def _check_module(m, shape, train=True, input_grad=True, atol=1e-5, rtol=1e-4):
    mt = copy.deepcopy(m).to(DEV)
    m.train(train)
    mt.train(train)
    x = torch.randn(shape, requires_grad=input_grad)
    xt = x.detach().to(DEV).requires_grad_(input_grad)
    yc, yt = m(x), mt(xt)
    torch.testing.assert_close(yt.cpu(), yc, atol=atol, rtol=rtol)
    g = torch.randn_like(yc)
    yc.backward(g)
    yt.backward(g.to(DEV))
    if input_grad:
        torch.testing.assert_close(xt.grad.cpu(), x.grad, atol=atol, rtol=rtol)
    for (name, p), pt in zip(m.named_parameters(), mt.parameters()):
        torch.testing.assert_close(pt.grad.cpu(), p.grad, atol=atol, rtol=rtol, msg=name)
    for (name, b), bt in zip(m.named_buffers(), mt.buffers()):
        torch.testing.assert_close(bt.cpu(), b, atol=atol, rtol=rtol, msg=name)


NORM_CASES = [
    (lambda: nn.BatchNorm2d(3), (4, 3, 5, 5), True, True),
    (lambda: nn.BatchNorm2d(3), (4, 3, 5, 5), False, True),
    (lambda: nn.BatchNorm1d(3), (4, 3), True, False),
    (lambda: nn.BatchNorm1d(3, affine=False), (4, 3, 6), True, True),
    (lambda: nn.BatchNorm1d(3, track_running_stats=False), (4, 3, 6), True, True),
    (lambda: nn.BatchNorm3d(2, momentum=None), (2, 2, 3, 3, 3), True, True),
    (lambda: nn.LayerNorm(6), (4, 3, 6), True, True),
    (lambda: nn.LayerNorm((3, 6)), (4, 3, 6), True, True),
    (lambda: nn.LayerNorm(6, elementwise_affine=False), (4, 3, 6), True, True),
    (lambda: nn.LayerNorm(6, bias=False), (4, 6), True, False),
    (lambda: nn.GroupNorm(2, 4), (3, 4, 5, 5), True, True),
    (lambda: nn.GroupNorm(4, 4, affine=False), (3, 4, 5), True, True),
    (lambda: nn.GroupNorm(1, 6), (3, 6), True, True),
]


@pytest.mark.parametrize("case", NORM_CASES,
                         ids=lambda c: f"{type(c[0]()).__name__}-{'x'.join(map(str, c[1]))}"
                         f"-{'train' if c[2] else 'eval'}")
def test_norm(case):
    make, shape, train, input_grad = case
    torch.manual_seed(0)
    m = make()
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(0.5, 1.5)
        for name, b in m.named_buffers():
            if name == "running_mean":
                b.uniform_(-0.5, 0.5)
            elif name == "running_var":
                b.uniform_(0.5, 2.0)
    _check_module(m, shape, train=train, input_grad=input_grad)


def test_batch_norm_updates_running_stats_over_steps():
    m = nn.BatchNorm2d(3)
    mt = copy.deepcopy(m).to(DEV)
    for _ in range(3):
        x = torch.randn(4, 3, 4, 4) * 2 + 1
        m(x)
        mt(x.to(DEV))
    torch.testing.assert_close(mt.running_mean.cpu(), m.running_mean)
    torch.testing.assert_close(mt.running_var.cpu(), m.running_var)
    assert mt.num_batches_tracked.item() == 3


@pytest.mark.parametrize("op", ["legit-train", "legit-eval", "with_update", "no_update"])
def test_batch_norm_internal_variants(op):
    # The forms torch.export / compiled graphs and some callers use directly.
    x, w, b = torch.randn(4, 3, 5), torch.rand(3) + 0.5, torch.randn(3)
    rm, rv = torch.randn(3) * 0.1, torch.rand(3) + 0.5
    rmt, rvt = rm.to(DEV), rv.to(DEV)
    fn = {
        "legit-train": lambda *a: torch.ops.aten._native_batch_norm_legit(*a, True, 0.1, 1e-5),
        "legit-eval": lambda *a: torch.ops.aten._native_batch_norm_legit(*a, False, 0.1, 1e-5),
        "with_update": lambda *a: torch.ops.aten._batch_norm_with_update(*a, 0.1, 1e-5),
        "no_update": lambda *a: torch.ops.aten._batch_norm_no_update(*a, 0.1, 1e-5),
    }[op]
    out_c = fn(x, w, b, rm, rv)
    out_t = fn(x.to(DEV), w.to(DEV), b.to(DEV), rmt, rvt)
    torch.testing.assert_close(out_t[0].cpu(), out_c[0])
    torch.testing.assert_close(rmt.cpu(), rm)
    torch.testing.assert_close(rvt.cpu(), rv)
    if op == "with_update":
        xc, xt = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
        out = torch.ops.aten._batch_norm_with_update(xc, w, b, rm, rv, 0.1, 1e-5)[0]
        out.pow(2).sum().backward()
        torch.ops.aten._batch_norm_with_update(xt, w.to(DEV), b.to(DEV), rmt, rvt, 0.1,
                                               1e-5)[0].pow(2).sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_norm_half(dtype):
    x = torch.randn(2, 4, 5, 5).to(dtype)
    for fn, kw in [(F.layer_norm, dict(normalized_shape=(5,))), (F.group_norm, dict(num_groups=2)),
                   (lambda t: F.batch_norm(t, None, None, training=True), {})]:
        xc = x.clone().requires_grad_()
        xt = x.to(DEV).requires_grad_()
        yc, yt = fn(xc, **kw), fn(xt, **kw)
        assert yt.dtype == dtype
        torch.testing.assert_close(yt.cpu(), yc, atol=2e-2, rtol=2e-2)
        g = torch.randn_like(yc)
        yc.backward(g)
        yt.backward(g.to(DEV))
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=5e-2, rtol=5e-2)


# ---- dropout ----


def test_dropout_reproducible_and_keep_rate():
    x = torch.randn(200, 100, device=DEV)
    torch.manual_seed(5)
    a = F.dropout(x, 0.3).cpu()
    torch.manual_seed(5)
    b = F.dropout(x, 0.3).cpu()
    c = F.dropout(x, 0.3).cpu()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    kept = a != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01  # 20000 draws: std ~0.003
    torch.testing.assert_close(a[kept], x.cpu()[kept] / 0.7)


def test_dropout_backward_uses_the_mask():
    x = torch.randn(30, 40, device=DEV, requires_grad=True)
    y = F.dropout(x, 0.5)
    y.backward(torch.ones_like(y))
    kept = (y.detach().cpu() != 0).float()
    torch.testing.assert_close(x.grad.cpu(), kept * 2)


def test_dropout_edge_probabilities_and_eval():
    x = torch.randn(8, 8, device=DEV)
    assert torch.equal(F.dropout(x, 0.0).cpu(), x.cpu())
    assert torch.count_nonzero(F.dropout(x, 1.0).cpu()) == 0
    assert torch.equal(F.dropout(x, 0.5, training=False).cpu(), x.cpu())
    out, mask = torch.native_dropout(x, 0.5, False)
    assert torch.equal(out.cpu(), x.cpu()) and bool(mask.cpu().all())
    assert F.dropout(x.bfloat16(), 0.5).dtype == torch.bfloat16


# ---- embedding ----


@pytest.mark.parametrize("kw", [{}, dict(padding_idx=2), dict(scale_grad_by_freq=True)],
                         ids=["plain", "padding_idx", "scale_grad_by_freq"])
def test_embedding(kw):
    idx = torch.tensor([[1, 2, 3], [3, 3, 9]])
    w = torch.randn(10, 4)
    wc, wt = w.clone().requires_grad_(), w.to(DEV).requires_grad_()
    yc, yt = F.embedding(idx, wc, **kw), F.embedding(idx.to(DEV), wt, **kw)
    torch.testing.assert_close(yt.cpu(), yc)
    g = torch.randn_like(yc)
    yc.backward(g)
    yt.backward(g.to(DEV))
    torch.testing.assert_close(wt.grad.cpu(), wc.grad)


BAG_I = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
BAG_O = torch.tensor([0, 2, 2, 5])  # the second bag is empty


@pytest.mark.parametrize("kw", [dict(mode="sum"), dict(mode="mean"), dict(mode="max"),
                                dict(mode="sum", padding_idx=2), dict(mode="max", padding_idx=4),
                                dict(mode="mean", include_last_offset=True)],
                         ids=["sum", "mean", "max", "sum-padding", "max-padding", "last-offset"])
def test_embedding_bag(kw):
    offsets = torch.cat([BAG_O, torch.tensor([8])]) if kw.get("include_last_offset") else BAG_O
    w = torch.randn(10, 3)
    wc, wt = w.clone().requires_grad_(), w.to(DEV).requires_grad_()
    yc = F.embedding_bag(BAG_I, wc, offsets, **kw)
    yt = F.embedding_bag(BAG_I.to(DEV), wt, offsets.to(DEV), **kw)
    torch.testing.assert_close(yt.cpu(), yc)
    g = torch.randn_like(yc)
    yc.backward(g)
    yt.backward(g.to(DEV))
    torch.testing.assert_close(wt.grad.cpu(), wc.grad)


def test_embedding_bag_per_sample_weights():
    w, psw = torch.randn(10, 3), torch.rand(8)
    args_c = [t.clone().requires_grad_() for t in (w, psw)]
    args_t = [t.to(DEV).requires_grad_() for t in (w, psw)]
    yc = F.embedding_bag(BAG_I, args_c[0], BAG_O, per_sample_weights=args_c[1], mode="sum")
    yt = F.embedding_bag(BAG_I.to(DEV), args_t[0], BAG_O.to(DEV), per_sample_weights=args_t[1],
                         mode="sum")
    torch.testing.assert_close(yt.cpu(), yc)
    yc.sum().backward()
    yt.sum().backward()
    for c, t in zip(args_c, args_t):
        torch.testing.assert_close(t.grad.cpu(), c.grad)


# ---- unfold / fold ----

FOLD_CASES = [
    (F.unfold, (2, 3, 6, 7), dict(kernel_size=3)),
    (F.unfold, (2, 3, 6, 7), dict(kernel_size=(2, 3), dilation=(2, 1), padding=(1, 2),
                                  stride=(2, 3))),
    (F.unfold, (3, 6, 7), dict(kernel_size=2, stride=2)),
    (F.fold, (2, 12, 12), dict(output_size=(5, 6), kernel_size=2, padding=1, stride=2)),
    (F.fold, (2, 18, 9), dict(output_size=(6, 7), kernel_size=(2, 3), dilation=(2, 1),
                              padding=(1, 2), stride=(2, 3))),
]


@pytest.mark.parametrize("case", FOLD_CASES,
                         ids=lambda c: f"{c[0].__name__}-{'x'.join(map(str, c[1]))}")
def test_unfold_fold(case):
    fn, shape, kw = case
    _check(fn, torch.randn(shape), **kw)


def test_channel_shuffle():
    _check(lambda t: F.channel_shuffle(t, 3), torch.randn(2, 6, 3, 3))


# ---- integer inputs and dtypes the CPU kernels refuse ----


def test_integer_conv_and_pooling():
    x = torch.arange(-20, 30).view(1, 2, 5, 5)
    w = torch.arange(-4, 14).view(2, 1, 3, 3)
    assert torch.equal(F.conv2d(x.to(DEV), w.to(DEV), groups=2, padding=1).cpu(),
                       F.conv2d(x, w, groups=2, padding=1))
    assert torch.equal(F.max_pool2d(x.to(DEV), 3, stride=2, padding=1).cpu(),
                       F.max_pool2d(x, 3, stride=2, padding=1))
    assert torch.equal(F.avg_pool2d(x.to(DEV), 3, stride=2, ceil_mode=True).cpu(),
                       F.avg_pool2d(x, 3, stride=2, ceil_mode=True))
    img = (torch.arange(32) * 7 % 256).view(1, 2, 4, 4).to(torch.uint8)
    assert torch.equal(F.interpolate(img.to(DEV), scale_factor=2).cpu(),
                       F.interpolate(img, scale_factor=2))


@pytest.mark.parametrize("fn", [
    lambda t: F.adaptive_avg_pool2d(t, 3),
    lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"),
    lambda t: F.max_pool2d(t.bool(), 2),
    lambda t: F.pad(t.bool(), (1, 1, 1, 1), mode="reflect"),
], ids=["adaptive_avg-long", "bilinear-long", "max_pool-bool", "reflect-bool"])
def test_refuses_dtypes_like_cpu(fn):
    x = torch.arange(32).view(1, 2, 4, 4)
    with pytest.raises(RuntimeError, match="not implemented for"):
        fn(x)
    with pytest.raises(RuntimeError, match="not implemented for"):
        fn(x.to(DEV))


# ---- upsampling and edge padding ----

RESAMPLE_CASES = [
    (F.interpolate, (2, 3, 4, 5), dict(scale_factor=2, mode="nearest")),
    (F.interpolate, (2, 3, 4, 5), dict(size=(7, 3), mode="nearest")),
    (F.interpolate, (2, 3, 4, 5), dict(scale_factor=1.7, mode="nearest")),
    (F.interpolate, (2, 3, 4, 5), dict(size=(7, 9), mode="nearest-exact")),
    (F.interpolate, (2, 3, 4, 5), dict(scale_factor=2, mode="bilinear")),
    (F.interpolate, (2, 3, 4, 5), dict(size=(7, 3), mode="bilinear", align_corners=True)),
    (F.interpolate, (2, 3, 4, 5), dict(scale_factor=(1.5, 2.5), mode="bilinear")),
    (F.interpolate, (2, 3, 6, 5), dict(size=(3, 2), mode="bilinear")),
    (F.interpolate, (2, 3, 5), dict(scale_factor=2, mode="linear")),
    (F.interpolate, (1, 2, 3, 4, 5), dict(scale_factor=2, mode="trilinear")),
    (F.interpolate, (1, 2, 3, 4, 5), dict(size=(4, 5, 7), mode="nearest")),
    (F.interpolate, (2, 3, 4, 5), dict(scale_factor=2, mode="bicubic")),
    (F.interpolate, (2, 3, 7, 6), dict(size=(3, 9), mode="bicubic", align_corners=True)),
    (F.pad, (2, 3, 4, 5), dict(pad=(1, 2, 3, 0), mode="reflect")),
    (F.pad, (2, 3, 4, 5), dict(pad=(1, 2, 3, 0), mode="replicate")),
    (F.pad, (2, 3, 5), dict(pad=(4, 2), mode="reflect")),
    (F.pad, (2, 3, 5), dict(pad=(4, 2), mode="replicate")),
    (F.pad, (1, 2, 3, 4, 5), dict(pad=(1, 2, 0, 1, 2, 1), mode="replicate")),
    (F.pad, (1, 2, 3, 4, 5), dict(pad=(1, 2, 0, 1, 2, 1), mode="reflect")),
]


@pytest.mark.parametrize("case", RESAMPLE_CASES,
                         ids=lambda c: f"{c[2]['mode']}-{'x'.join(map(str, c[1]))}")
def test_resample_and_pad(case):
    fn, shape, kw = case
    _check(fn, torch.randn(shape), atol=1e-5, rtol=1e-5, **kw)


# ---- a small CNN ----


class SmallCNN(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(p), nn.Linear(16, 5))

    def forward(self, x):
        return self.head(self.features(x))


def _run_step(model, x, target):
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    return loss


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train-no-dropout"])
def test_small_cnn_matches_cpu(train):
    torch.manual_seed(0)
    m = SmallCNN(p=0.5 if not train else 0.0)
    mt = copy.deepcopy(m).to(DEV)
    m.train(train)
    mt.train(train)
    x, target = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 4, 2])
    loss_c = _run_step(m, x, target)
    loss_t = _run_step(mt, x.to(DEV), target.to(DEV))
    torch.testing.assert_close(loss_t.cpu(), loss_c, atol=1e-5, rtol=1e-5)
    for (name, p), pt in zip(m.named_parameters(), mt.parameters()):
        torch.testing.assert_close(pt.grad.cpu(), p.grad, atol=1e-4, rtol=1e-4, msg=name)
    for (name, b), bt in zip(m.named_buffers(), mt.buffers()):
        torch.testing.assert_close(bt.cpu(), b, msg=name)


def test_small_cnn_trains_with_dropout():
    torch.manual_seed(0)
    m = SmallCNN(p=0.5).to(DEV).train()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, target = torch.randn(8, 3, 16, 16, device=DEV), torch.randint(0, 5, (8,), device=DEV)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        losses.append(_run_step(m, x, target).item())
        opt.step()
    assert all(torch.isfinite(torch.tensor(losses)))
    assert all(p.grad is not None and torch.isfinite(p.grad.cpu()).all() for p in m.parameters())


# ---- the same lowerings inside torch.compile graphs ----


def _compiled_step_matches_cpu(input_grad):
    from torchtpu import _dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    m = SmallCNN(p=0.0).train()
    mt = copy.deepcopy(m).to(DEV)
    cm = torch.compile(mt, backend="tpu")
    x, target = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 4, 2])
    xc = x.clone().requires_grad_(input_grad)
    xt = x.to(DEV).requires_grad_(input_grad)
    eager_before = len(_dynamo._eager_graphs)
    loss_c = _run_step(m, xc, target)
    loss_t = _run_step(cm, xt, target.to(DEV))
    assert len(_dynamo._eager_graphs) == eager_before, _dynamo._eager_graphs
    torch.testing.assert_close(loss_t.cpu(), loss_c, atol=1e-5, rtol=1e-5)
    for (name, p), pt in zip(m.named_parameters(), mt.parameters()):
        torch.testing.assert_close(pt.grad.cpu(), p.grad, atol=1e-4, rtol=1e-4, msg=name)
    for (name, b), bt in zip(m.named_buffers(), mt.buffers()):
        torch.testing.assert_close(bt.cpu(), b, msg=name)


def test_compiled_small_cnn_matches_cpu():
    _compiled_step_matches_cpu(input_grad=True)


def test_compiled_small_cnn_first_layer_without_input_grad():
    _compiled_step_matches_cpu(input_grad=False)


def _close_nan(a, b, rtol=1e-4, atol=1e-5):
    """The tpu result `b` matches the CPU's `a`, NaN equal to NaN."""
    torch.testing.assert_close(b.cpu(), a, rtol=rtol, atol=atol, equal_nan=True)


# ---- rrelu ----


@pytest.mark.parametrize("lower,upper", [(0.125, 1 / 3), (0.1, 0.3), (0.0, 1.0)])
def test_rrelu_eval_exact(lower, upper):
    torch.manual_seed(0)
    x = torch.randn(5, 7)
    x[0, 0] = float("nan")
    xc = x.clone().requires_grad_()
    xt = x.to(DEV).requires_grad_()
    a = F.rrelu(xc, lower, upper, training=False)
    b = F.rrelu(xt, lower, upper, training=False)
    torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0, equal_nan=True)
    g = torch.randn(5, 7)
    a.backward(g)
    b.backward(g.to(DEV))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=0, atol=0)


def test_rrelu_training():
    torch.manual_seed(0)
    x = torch.randn(64, 33)
    lower, upper = 0.1, 0.3
    xt = x.to(DEV).requires_grad_()
    y = F.rrelu(xt, lower, upper, training=True)
    y.sum().backward()
    y, slope = y.detach().cpu(), xt.grad.cpu()
    neg = x <= 0
    assert torch.equal(y[~neg], x[~neg]) and torch.all(slope[~neg] == 1)
    r = slope[neg]
    assert r.min() >= lower and r.max() < upper and r.std() > 0.03
    torch.testing.assert_close(y[neg], x[neg] * r)
    # The noise tensor of rrelu_with_noise is written in place.
    noise = torch.empty(64, 33, device=DEV)
    out = torch.ops.aten.rrelu_with_noise(x.to(DEV), noise, lower, upper, True)
    n = noise.cpu()
    assert torch.all(n[~neg] == 1) and n[neg].min() >= lower
    torch.testing.assert_close(out.cpu(), x * n)
    # Seeded draws repeat.
    torch.manual_seed(5)
    a = F.rrelu(x.to(DEV), training=True).cpu()
    torch.manual_seed(5)
    b = F.rrelu(x.to(DEV), training=True).cpu()
    assert torch.equal(a, b)


# ---- fractional max pooling ----


@pytest.mark.parametrize(
    "shape,kernel,out",
    [
        ((2, 3, 9, 11), (2, 3), (4, 5)),
        ((3, 7, 7), (3, 3), (3, 3)),
        ((1, 2, 5, 5), (2, 2), (1, 1)),
        ((2, 3, 5, 5, 5), (2, 2, 2), (2, 3, 2)),
        ((2, 6, 7, 8), (2, 2, 3), (3, 4, 2)),
    ],
)
def test_fractional_max_pool(shape, kernel, out):
    torch.manual_seed(0)
    nd = len(kernel)
    x = torch.randn(shape)
    batched = len(shape) == nd + 2
    n = shape[0] if batched else 1
    c = shape[1] if batched else shape[0]
    fn = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d
    for _ in range(3):
        rs = torch.rand(n, c, nd)
        xc = x.clone().requires_grad_()
        xt = x.to(DEV).requires_grad_()
        a, ai = fn(xc, kernel, output_size=out, return_indices=True, _random_samples=rs)
        b, bi = fn(xt, kernel, output_size=out, return_indices=True, _random_samples=rs.to(DEV))
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0)
        assert torch.equal(bi.cpu(), ai)
        g = torch.randn_like(a)
        a.backward(g)
        b.backward(g.to(DEV))
        _close_nan(xc.grad, xt.grad)


# ---- scaled_dot_product_attention with attn_mask and is_causal=True together (issue 32) ----

@pytest.mark.parametrize("mask_kind", ["all_true", "random_bool", "float", "fully_masked_row"])
@pytest.mark.parametrize("head_dim", [64, 80, 128])
@pytest.mark.parametrize("seq", [(8, 8), (17, 17), (8, 12), (12, 8)])
def test_sdpa_mask_and_is_causal_like_the_cpu(seq, head_dim, mask_kind):
    # PyTorch documents the pair as an error and its math kernel raises, but the CPU picks its
    # flash kernel for these inputs, which applies both masks (causal top-left aligned); tpu sent
    # everything to math and raised. Forward and backward against the CPU.
    from conftest import check_forward_backward

    sq, sk = seq
    g = torch.Generator().manual_seed(sq * 1000 + head_dim)
    q = torch.randn(2, 3, sq, head_dim, generator=g)
    k = torch.randn(2, 3, sk, head_dim, generator=g)
    v = torch.randn(2, 3, sk, head_dim, generator=g)
    if mask_kind == "all_true":
        mask = torch.ones(sq, sk, dtype=torch.bool)
    elif mask_kind == "random_bool":
        mask = torch.rand(sq, sk, generator=g) > 0.3
        mask[:, 0] = True  # every row keeps a key the causal mask keeps too
    elif mask_kind == "float":
        mask = torch.randn(2, 1, sq, sk, generator=g)
    else:
        mask = torch.ones(sq, sk, dtype=torch.bool)
        mask[sq // 2] = False
    check_forward_backward(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True),
        [q, k, v, mask], grad_args=(0, 1, 2), rtol=1e-4, atol=1e-5, equal_nan=True)


def test_sdpa_mask_and_is_causal_where_the_cpu_raises():
    # With dropout, or 3-D inputs, the CPU takes its math kernel and raises; so does tpu.
    q = torch.randn(2, 8, 16)
    m = torch.ones(8, 8, dtype=torch.bool)
    for args, kw in [((q, q, q), {}), ((q[None], q[None], q[None]), dict(dropout_p=0.5))]:
        for d in ("cpu", "tpu"):
            with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal"):
                F.scaled_dot_product_attention(*(a.to(d) for a in args), attn_mask=m.to(d),
                                               is_causal=True, **kw)


def test_sdpa_mask_and_is_causal_compiled_and_inference_mode():
    q, k, v = (torch.randn(1, 2, 8, 64, generator=torch.Generator().manual_seed(i)) for i in range(3))
    m = torch.rand(8, 8, generator=torch.Generator().manual_seed(9)) > 0.3
    m[:, 0] = True
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True)
    args = [t.to("tpu") for t in (q, k, v, m)]
    with torch.inference_mode():
        got = F.scaled_dot_product_attention(*args[:3], attn_mask=args[3], is_causal=True)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    f = torch.compile(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                        is_causal=True),
                      backend="tpu")
    torch.testing.assert_close(f(*args).cpu(), want, rtol=1e-4, atol=1e-5)
