"""Ops that used to run only through the CPU fallback: margin losses, igamma/igammac, ...
Each is checked against CPU PyTorch (forward and, where differentiable, backward) with no CPU
fallback."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu


def _fallbacks():
    return dict(torchtpu.metrics()["cpu_fallbacks_by_op"])


def _check(fn, inputs, grad_args=(0,), **tol):
    """Runs fn on CPU and tpu copies of `inputs`; compares outputs and input gradients."""
    before = _fallbacks()
    cpu = [x.detach().clone().requires_grad_(i in grad_args) for i, x in enumerate(inputs)]
    dev = [x.detach().to("tpu").requires_grad_(i in grad_args) for i, x in enumerate(inputs)]
    out_cpu, out_tpu = fn(*cpu), fn(*dev)
    assert out_tpu.dtype == out_cpu.dtype and out_tpu.shape == out_cpu.shape
    torch.testing.assert_close(out_tpu.cpu(), out_cpu, **tol)
    if grad_args:
        grad = torch.randn_like(out_cpu)
        out_cpu.backward(grad)
        out_tpu.backward(grad.to("tpu"))
        for i in grad_args:
            torch.testing.assert_close(dev[i].grad.cpu(), cpu[i].grad, **tol)
    assert _fallbacks() == before, {k: v for k, v in _fallbacks().items() if before.get(k) != v}


REDUCTIONS = ["mean", "sum", "none"]


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
        _check(lambda a, tt, ww: F.multi_margin_loss(a, tt, p=p, margin=0.7, weight=ww,
                                                     reduction=reduction), [x, t, w])
    else:
        _check(lambda a, tt: F.multi_margin_loss(a, tt, p=p, margin=0.7, reduction=reduction),
               [x, t])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multi_margin_loss_unbatched_1d_target(reduction):
    _check(lambda a, tt: F.multi_margin_loss(a, tt, reduction=reduction),
           [torch.randn(5), torch.tensor([3])])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("batched", [False, True])
def test_multilabel_margin_loss(reduction, batched):
    torch.manual_seed(0)
    t = torch.tensor([[3, 0, -1, 1, 1], [1, 1, 4, 2, 0], [-1, 2, 2, 2, 2]])
    x = torch.randn(3, 5)
    if not batched:
        x, t = x[0], t[0]
    _check(lambda a, tt: F.multilabel_margin_loss(a, tt, reduction=reduction), [x, t])


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
def test_igamma_igammac_match_cpu(fn):
    """All of calc_igamma/calc_igammac's branches: series, continued fraction, the igamc
    series, the asymptotic expansion (20 < a < 200 and a > 200 with x ~ a), boundary values."""
    torch.manual_seed(0)
    special_a = [0., 0., 1., float("inf"), 2., float("nan"), -1., 3., 50., 250., 0.3, 1.05]
    special_x = [1., 0., 0., 2., float("inf"), 0., 1., float("nan"), 52., 255., 0.7, 1.02]
    a = torch.cat([torch.rand(100) * 5, torch.rand(100) * 300, torch.tensor(special_a)])
    x = torch.cat([torch.rand(100) * 5, torch.rand(100) * 300, torch.tensor(special_x)])
    _check(fn, [a, x], grad_args=(), rtol=1e-4, atol=1e-5, equal_nan=True)


def test_igamma_grad_wrt_x():
    torch.manual_seed(0)
    a, x = torch.rand(20) * 4 + 0.1, torch.rand(20) * 4 + 0.1
    _check(lambda aa, xx: torch.igamma(aa, xx), [a, x], grad_args=(1,), rtol=1e-4, atol=1e-5)
