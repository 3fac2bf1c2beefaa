"""torch.amp.GradScaler("tpu") with float16 autocast, step for step against GradScaler("cpu")."""

import math

import pytest
import torch
import torch.nn as nn

import torchtpu

AMP_OPS = ("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_")


def _amp_fallbacks():
    fb = torchtpu.metrics()["cpu_fallbacks_by_op"]
    return {k: v for k, v in fb.items() if k.startswith("aten::_amp")}


def _train(dev, inject_inf_at=None, steps=10):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(dev, init_scale=2.0**10, growth_interval=3)
    gen = torch.Generator().manual_seed(1)
    record = []
    for i in range(steps):
        x = torch.randn(5, 8, generator=gen).to(dev)
        y = torch.randn(5, 4, generator=gen).to(dev)
        with torch.autocast(dev, dtype=torch.float16):
            out = model(x)
            assert out.dtype == torch.float16
            loss = nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        if inject_inf_at == i:
            model[0].weight.grad[0, 0] = float("inf")
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        after = [p.detach().cpu().clone() for p in model.parameters()]
        opt.zero_grad()
        skipped = all(torch.equal(a, b) for a, b in zip(before, after))
        record.append((loss.item(), scaler.get_scale(), int(scaler._growth_tracker.item()), skipped))
    return record, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("inject", [None, 4])
def test_grad_scaler_float16_training_matches_cpu(inject):
    before = _amp_fallbacks()
    cpu, cpu_params = _train("cpu", inject)
    tpu, tpu_params = _train("tpu", inject)
    assert _amp_fallbacks() == before, "GradScaler ops fell back to the CPU"
    for i, ((lc, sc, gc, kc), (lt, st, gt, kt)) in enumerate(zip(cpu, tpu)):
        assert sc == st, f"step {i}: scale {st} != cpu {sc}"
        assert gc == gt, f"step {i}: growth tracker {gt} != cpu {gc}"
        assert kc == kt, f"step {i}: skipped {kt} != cpu {kc}"
        assert math.isclose(lc, lt, rel_tol=1e-3, abs_tol=1e-4), f"step {i}: loss {lt} != {lc}"
    for a, b in zip(cpu_params, tpu_params):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4)
    if inject is not None:
        # The injected inf skips that step and halves the scale (growth tracker reset).
        assert tpu[inject][3]
        assert tpu[inject][1] == tpu[inject - 1][1] * 0.5 and tpu[inject][2] == 0
    # Growth happened at least once (interval 3).
    assert max(r[1] for r in tpu) > 2.0**10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("inv_scale", [0.125, 1.0])
def test_non_finite_check_and_unscale_matches_cpu(dtype, inv_scale):
    gen = torch.Generator().manual_seed(2)
    grads = [(torch.randn(7, 3, generator=gen) * 100).to(dtype), torch.randn(5, generator=gen).to(dtype)]
    cases = [lambda g: None, lambda g: g[1].__setitem__(2, float("nan")),
             lambda g: g[0].__setitem__((1, 1), float("-inf"))]
    for case in cases:
        g_cpu = [g.clone() for g in grads]
        case(g_cpu)
        g_tpu = [g.to("tpu") for g in g_cpu]
        f_cpu, f_tpu = torch.zeros(1), torch.zeros(1, device="tpu")
        inv_cpu = torch.full((1,), inv_scale)
        torch._amp_foreach_non_finite_check_and_unscale_(g_cpu, f_cpu, inv_cpu)
        torch._amp_foreach_non_finite_check_and_unscale_(g_tpu, f_tpu, inv_cpu.to("tpu"))
        assert torch.equal(f_tpu.cpu(), f_cpu)
        for a, b in zip(g_cpu, g_tpu):
            torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0, equal_nan=True)


def test_update_scale_matches_cpu():
    for found, tracker, interval in [(0.0, 0, 3), (0.0, 2, 3), (1.0, 2, 3), (0.0, 0, 1)]:
        for init in (1024.0, 3.0e38):  # growth past float max keeps the old scale
            s_c = torch.full((1,), init)
            t_c = torch.full((1,), tracker, dtype=torch.int32)
            s_t, t_t = s_c.to("tpu"), t_c.to("tpu")
            r_c = torch._amp_update_scale_(s_c, t_c, torch.full((1,), found), 2.0, 0.5, interval)
            r_t = torch._amp_update_scale_(s_t, t_t, torch.full((1,), found, device="tpu"), 2.0, 0.5,
                                           interval)
            assert r_t is s_t and r_c is s_c
            assert torch.equal(s_t.cpu(), s_c) and torch.equal(t_t.cpu(), t_c)
