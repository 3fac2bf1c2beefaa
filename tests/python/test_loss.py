import pytest
import torch
import torch.nn.functional as F

import torchtpu


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

def _fallbacks():
    return dict(torchtpu.metrics()["cpu_fallbacks_by_op"])


def _check_loss(fn, inputs, dtype, grad_args=(0,)):
    """Runs fn on CPU and tpu copies of `inputs`; compares outputs and input gradients."""
    before = _fallbacks()
    cpu = [x.detach().clone().requires_grad_(i in grad_args) for i, x in enumerate(inputs)]
    dev = [x.detach().to("tpu").requires_grad_(i in grad_args) for i, x in enumerate(inputs)]
    out_cpu, out_tpu = fn(*cpu), fn(*dev)
    assert out_tpu.dtype == out_cpu.dtype and out_tpu.shape == out_cpu.shape
    tol = dict(rtol=1.6e-2, atol=1e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out_tpu.cpu(), out_cpu, **tol)
    grad = torch.randn_like(out_cpu)
    out_cpu.backward(grad)
    out_tpu.backward(grad.to("tpu"))
    for i in grad_args:
        torch.testing.assert_close(dev[i].grad.cpu(), cpu[i].grad, **tol)
    assert _fallbacks() == before, {k: v for k, v in _fallbacks().items() if before.get(k) != v}


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
    before = _fallbacks()
    out = torch.compile(step, backend="tpu")(xt, t.to("tpu"))
    ref = step(xc, t)
    torch.testing.assert_close(out.cpu(), ref)
    out.backward()
    ref.backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    assert _fallbacks() == before
    torch._dynamo.reset()
