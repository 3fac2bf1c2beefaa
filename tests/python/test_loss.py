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
