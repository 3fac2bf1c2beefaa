"""Training on tpu matches CPU: a small MLP (Linear/ReLU/MSE) gives the same loss and gradients,
several SGD steps (plain and with momentum/weight decay) give the same losses and weights."""

import copy

import pytest
import torch
from torch.testing import assert_close

from torchtpu.testing.fallbacks import fallback_counts, make, new_fallbacks

TOL = dict(rtol=1e-4, atol=1e-5)


def make_mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
        torch.nn.Linear(8, 3),
    )


def make_data(seed=1, n=10):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randn(n, 3, generator=g)


def test_mlp_loss_and_gradients_match_cpu():
    cpu = make_mlp()
    tpu = copy.deepcopy(cpu).to("tpu")
    x, y = make_data()
    loss_c = torch.nn.functional.mse_loss(cpu(x), y)
    loss_t = torch.nn.functional.mse_loss(tpu(x.to("tpu")), y.to("tpu"))
    assert loss_t.is_tpu and loss_t.requires_grad
    assert_close(loss_t.cpu(), loss_c.detach(), **TOL)
    loss_c.backward()
    loss_t.backward()
    for (name, pc), pt in zip(cpu.named_parameters(), tpu.parameters()):
        assert pt.grad is not None and pt.grad.is_tpu, name
        assert pt.grad.shape == pc.grad.shape
        assert_close(pt.grad.cpu(), pc.grad, **TOL, msg=f"gradient of {name}")


def test_input_gradient_and_grad_accumulation():
    cpu = make_mlp(3)
    tpu = copy.deepcopy(cpu).to("tpu")
    x, y = make_data(4, n=5)
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    for _ in range(2):  # gradients accumulate over two backward passes
        torch.nn.functional.mse_loss(cpu(xc), y, reduction="sum").backward()
        torch.nn.functional.mse_loss(tpu(xt), y.to("tpu"), reduction="sum").backward()
    assert_close(xt.grad.cpu(), xc.grad, **TOL)
    for pc, pt in zip(cpu.parameters(), tpu.parameters()):
        assert_close(pt.grad.cpu(), pc.grad, **TOL)


@pytest.mark.parametrize("opt_kwargs", [dict(lr=0.05), dict(lr=0.05, momentum=0.9, weight_decay=1e-3)],
                         ids=["sgd", "momentum"])
def test_sgd_steps_match_cpu(opt_kwargs):
    cpu = make_mlp(5)
    tpu = copy.deepcopy(cpu).to("tpu")
    opt_c = torch.optim.SGD(cpu.parameters(), **opt_kwargs)
    opt_t = torch.optim.SGD(tpu.parameters(), **opt_kwargs)
    x, y = make_data(6, n=16)
    xt, yt = x.to("tpu"), y.to("tpu")
    losses_c, losses_t = [], []
    for _ in range(5):
        for model, opt, a, b, losses in ((cpu, opt_c, x, y, losses_c), (tpu, opt_t, xt, yt, losses_t)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(a), b)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert_close(torch.tensor(losses_t), torch.tensor(losses_c), **TOL)
    assert losses_c[-1] < losses_c[0]  # it trains
    for pc, pt in zip(cpu.parameters(), tpu.parameters()):
        assert pt.is_tpu
        assert_close(pt.detach().cpu(), pc.detach(), **TOL)


def test_backward_on_second_device():
    cpu = make_mlp(7)
    tpu = copy.deepcopy(cpu).to("tpu:1")
    x, y = make_data(8, n=4)
    torch.nn.functional.mse_loss(cpu(x), y).backward()
    torch.nn.functional.mse_loss(tpu(x.to("tpu:1")), y.to("tpu:1")).backward()
    for pc, pt in zip(cpu.parameters(), tpu.parameters()):
        assert pt.grad.device == torch.device("tpu:1")
        assert_close(pt.grad.cpu(), pc.grad, **TOL)


def test_no_grad_and_detach():
    m = make_mlp().to("tpu")
    x = torch.randn(2, 6, device="tpu")
    with torch.no_grad():
        out = m(x)
    assert not out.requires_grad
    d = m(x).detach()
    assert not d.requires_grad and d.is_tpu
    assert_close(d.cpu(), out.cpu())


def test_composite_implicit_ops_keep_their_gradients():
    # true_divide decomposes above the backend; a tpu kernel for it must not cut autograd off.
    a = torch.randn(5, requires_grad=True)
    b = torch.rand(5) + 0.5
    at = a.detach().to("tpu").requires_grad_()
    torch.true_divide(at, b.to("tpu")).square().sum().backward()
    torch.true_divide(a, b).square().sum().backward()
    torch.testing.assert_close(at.grad.cpu(), a.grad)


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
    assert not new_fallbacks(before)


def test_efficientzerotensor_factory():
    before = fallback_counts()
    z = torch._efficientzerotensor((2, 3), device="tpu")
    assert z.device == torch.device("tpu:0") and z.dtype == torch.float32 and z._is_zerotensor()
    assert torch.equal(z.cpu(), torch.zeros(2, 3))
    z = torch._efficientzerotensor((4,), dtype=torch.int32, device="tpu:1")
    assert z.device == torch.device("tpu:1") and z.dtype == torch.int32
    assert torch.equal((z + torch.arange(4, dtype=torch.int32, device="tpu:1")).cpu(),
                       torch.arange(4, dtype=torch.int32))
    assert not new_fallbacks(before)
