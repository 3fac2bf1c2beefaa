"""Losses on tpu against CPU PyTorch, forward and backward: cross entropy / nll (with weights,
ignore_index, 2d), pointwise losses, CTC, and the margin losses; no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from conftest import check_forward_backward
from torchtpu.testing.fallbacks import fallback_counts


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_forward_backward_matches_cpu(reduction, weighted):
    torch.manual_seed(0)
    x = torch.randn(6, 5, requires_grad=True)
    target = torch.tensor([0, 4, 2, -100, 1, 3])
    weight = torch.rand(5) if weighted else None
    before = torchtpu.metrics()["cpu_fallbacks"]

    xt = x.detach().to("tpu").requires_grad_()
    out_cpu = F.cross_entropy(x, target, weight=weight, reduction=reduction, ignore_index=-100)
    out_tpu = F.cross_entropy(xt, target.to("tpu"),
                              weight=None if weight is None else weight.to("tpu"),
                              reduction=reduction, ignore_index=-100)
    torch.testing.assert_close(out_tpu.cpu(), out_cpu)
    out_cpu.sum().backward()
    out_tpu.sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    assert torchtpu.metrics()["cpu_fallbacks"] == before


def test_nll_loss_unbatched():
    x = torch.randn(7).log_softmax(0)
    t = torch.tensor(3)
    torch.testing.assert_close(F.nll_loss(x.to("tpu"), t.to("tpu")).cpu(), F.nll_loss(x, t))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_mse_loss_forward_backward_matches_cpu(reduction, dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, dtype=dtype, requires_grad=True)
    y = torch.randn(3, 4, 5, dtype=dtype)
    before = torchtpu.metrics()["cpu_fallbacks"]
    xt = x.detach().to("tpu").requires_grad_()
    out_cpu = F.mse_loss(x, y, reduction=reduction)
    out_tpu = F.mse_loss(xt, y.to("tpu"), reduction=reduction)
    assert out_tpu.dtype == out_cpu.dtype and out_tpu.shape == out_cpu.shape
    tol = dict(rtol=1.6e-2, atol=1e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out_tpu.cpu(), out_cpu, **tol)
    grad = torch.randn_like(out_cpu)
    out_cpu.backward(grad)
    out_tpu.backward(grad.to("tpu"))
    torch.testing.assert_close(xt.grad.cpu(), x.grad, **tol)
    assert torchtpu.metrics()["cpu_fallbacks"] == before


# ---- pointwise losses, nll_loss2d: forward and backward against CPU, no CPU fallback ----

def _check_loss(fn, inputs, dtype, grad_args=(0,)):
    tol = dict(rtol=1.6e-2, atol=1e-2) if dtype == torch.bfloat16 else {}
    check_forward_backward(fn, inputs, grad_args, **tol)


REDUCTIONS = ["mean", "sum", "none"]
FLOATS = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name,fn", [
    ("l1", lambda x, y, r: F.l1_loss(x, y, reduction=r)),
    ("smooth_l1", lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.5)),
    ("smooth_l1_beta0", lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.0)),
    ("huber", lambda x, y, r: F.huber_loss(x, y, reduction=r, delta=0.7)),
    ("mse", lambda x, y, r: F.mse_loss(x, y, reduction=r)),
])
def test_regression_losses_match_cpu(name, fn, reduction, dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5).to(dtype)
    y = torch.randn(3, 4, 5).to(dtype)
    y[0, 0, :2] = x[0, 0, :2]  # zero differences hit the kinks
    _check_loss(lambda a, b: fn(a, b, reduction), [x, y], dtype, grad_args=(0, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy_matches_cpu(reduction, dtype, weighted):
    torch.manual_seed(0)
    p = torch.rand(4, 6).clamp(0.02, 0.98).to(dtype)
    p[0, 0], p[0, 1] = 0.0, 1.0  # log clamps at -100
    t = torch.rand(4, 6).to(dtype)
    w = torch.rand(6).to(dtype)
    if weighted:
        fn = lambda a, b, c: F.binary_cross_entropy(a, b, weight=c, reduction=reduction)
        inputs = [p, t, w]
    else:
        fn = lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction)
        inputs = [p, t]
    if dtype == torch.float32:
        _check_loss(fn, inputs, dtype)
    else:
        p[0, 0], p[0, 1] = 0.1, 0.9  # bf16 rounding near the clamps differs; keep it smooth
        _check_loss(fn, inputs, dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_with_logits_and_kl_div_match_cpu(reduction):
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    t = torch.rand(4, 6)
    pw = torch.rand(6) + 0.5
    _check_loss(lambda a, b, c: F.binary_cross_entropy_with_logits(a, b, pos_weight=c,
                                                                   reduction=reduction),
                [x, t, pw], torch.float32, grad_args=(0, 1))
    kl_red = "batchmean" if reduction == "mean" else reduction
    for log_target in (False, True):
        tt = t.log() if log_target else t
        _check_loss(lambda a, b: F.kl_div(a.log_softmax(-1), b, reduction=kl_red,
                                          log_target=log_target),
                    [x, tt], torch.float32, grad_args=(0, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss2d_and_cross_entropy_2d_match_cpu(reduction, dtype, weighted):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, 5).to(dtype)
    target = torch.randint(0, 4, (2, 3, 5))
    target[0, 0, 0] = -100
    w = torch.rand(4).to(dtype)
    if weighted:
        _check_loss(lambda a, b, c: F.cross_entropy(a, b, weight=c, reduction=reduction), [x, target, w],
                    dtype)
        _check_loss(lambda a, b, c: F.nll_loss(a, b, weight=c, reduction=reduction), [x, target, w],
                    dtype)
    else:
        _check_loss(lambda a, b: F.cross_entropy(a, b, reduction=reduction), [x, target], dtype)
        _check_loss(lambda a, b: F.nll_loss(a, b, reduction=reduction), [x, target], dtype)


def test_compiled_loss_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    t = torch.randn(4, 6)

    def step(a, b):
        return F.smooth_l1_loss(a, b) + F.huber_loss(a, b, delta=0.5) + F.mse_loss(a, b)

    xt = x.to("tpu").requires_grad_()
    xc = x.clone().requires_grad_()
    before = fallback_counts()
    out = torch.compile(step, backend="tpu")(xt, t.to("tpu"))
    ref = step(xc, t)
    torch.testing.assert_close(out.cpu(), ref)
    out.backward()
    ref.backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    assert fallback_counts() == before
    torch._dynamo.reset()


# ---- margin losses ----

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_multi_margin_loss(reduction, p, weighted, batched):
    torch.manual_seed(0)
    x = torch.randn(4, 6) if batched else torch.randn(6)
    t = torch.randint(0, 6, (4,)) if batched else torch.tensor(2)
    w = torch.rand(6)
    if weighted:
        check_forward_backward(lambda a, tt, ww: F.multi_margin_loss(a, tt, p=p, margin=0.7, weight=ww,
                                                     reduction=reduction), [x, t, w])
    else:
        check_forward_backward(lambda a, tt: F.multi_margin_loss(a, tt, p=p, margin=0.7, reduction=reduction),
               [x, t])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multi_margin_loss_unbatched_1d_target(reduction):
    check_forward_backward(lambda a, tt: F.multi_margin_loss(a, tt, reduction=reduction),
           [torch.randn(5), torch.tensor([3])])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("batched", [False, True])
def test_multilabel_margin_loss(reduction, batched):
    torch.manual_seed(0)
    t = torch.tensor([[3, 0, -1, 1, 1], [1, 1, 4, 2, 0], [-1, 2, 2, 2, 2]])
    x = torch.randn(3, 5)
    if not batched:
        x, t = x[0], t[0]
    check_forward_backward(lambda a, tt: F.multilabel_margin_loss(a, tt, reduction=reduction), [x, t])


def _close_nan(a, b, rtol=1e-4, atol=1e-5):
    """The tpu result `b` matches the CPU's `a`, NaN equal to NaN."""
    torch.testing.assert_close(b.cpu(), a, rtol=rtol, atol=atol, equal_nan=True)


# ---- ctc_loss ----


@pytest.mark.usefixtures("no_cpu_fallback")
@pytest.mark.parametrize("concat", [False, True])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss(concat, zero_infinity):
    torch.manual_seed(0)
    t, n, c, s = 8, 4, 5, 4
    log_probs = torch.randn(t, n, c).log_softmax(2)
    targets = torch.randint(1, c, (n, s))
    targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between
    input_lengths = [8, 6, 2, 8]  # sample 2 cannot emit its targets: infinite loss
    target_lengths = [4, 3, 3, 0]
    if concat:
        targets = torch.cat([targets[i, : target_lengths[i]] for i in range(n)])
    res = []
    for dev in ("cpu", "tpu"):
        x = log_probs.clone().to(dev).requires_grad_()
        loss = F.ctc_loss(x, targets.to(dev), input_lengths, target_lengths, reduction="none",
                          zero_infinity=zero_infinity)
        loss.backward(torch.arange(1.0, n + 1).to(dev))
        res.append((loss.detach(), x.grad))
    (a, ga), (b, gb) = res
    _close_nan(a, b)
    _close_nan(ga, gb)
