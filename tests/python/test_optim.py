"""Fused optimizers (Adam/AdamW/SGD(fused=True)) on tpu against CPU's fused kernels: results,
programs per step (one update program for all parameters), and no recompiles when lr changes."""

import pytest
import torch
import torch.nn as nn

import torchtpu
from torchtpu.testing.fallbacks import fallback_counts

CONFIGS = [
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (torch.optim.Adam, dict(lr=0.01, maximize=True, betas=(0.8, 0.9))),
    (torch.optim.AdamW, dict(lr=0.01)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True, maximize=True)),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3)),
]


def _model(dev):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 4)).to(dev)


def _train(dev, cls, kw, steps=10, lr_tensor=False, change_lr_at=None, scaler=None):
    model = _model(dev)
    kw = dict(kw)
    if lr_tensor:
        kw["lr"] = torch.tensor(kw["lr"])
    opt = cls(model.parameters(), fused=True, **kw)
    gen = torch.Generator().manual_seed(1)
    losses, execs, compiles = [], [], []
    for i in range(steps):
        x = torch.randn(6, 8, generator=gen).to(dev)
        y = torch.randn(6, 4, generator=gen).to(dev)
        loss = nn.functional.mse_loss(model(x), y)
        (scaler.scale(loss) if scaler else loss).backward()
        if change_lr_at is not None and i >= change_lr_at:
            for g in opt.param_groups:
                if isinstance(g["lr"], torch.Tensor):
                    g["lr"].fill_(kw["lr"] * 0.5 ** (i - change_lr_at + 1))
                else:
                    g["lr"] = kw["lr"] * 0.5 ** (i - change_lr_at + 1)
        m0 = torchtpu.metrics()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        m1 = torchtpu.metrics()
        execs.append(m1["executions"] - m0["executions"])
        compiles.append(m1["programs_compiled"] - m0["programs_compiled"])
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()], opt, execs, compiles


def _check_close(cpu, tpu):
    torch.testing.assert_close(torch.tensor(tpu[0]), torch.tensor(cpu[0]), rtol=1e-5, atol=1e-5)
    for a, b in zip(cpu[1], tpu[1]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    sc, st = cpu[2].state_dict()["state"], tpu[2].state_dict()["state"]
    assert sc.keys() == st.keys()
    for k in sc:
        for name, v in sc[k].items():
            if isinstance(v, torch.Tensor):
                torch.testing.assert_close(st[k][name].cpu(), v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls,kw", CONFIGS, ids=lambda c: getattr(c, "__name__", str(c)))
def test_fused_matches_cpu_fused(cls, kw):
    before = fallback_counts()
    cpu = _train("cpu", cls, kw)
    tpu = _train("tpu", cls, kw)
    assert fallback_counts() == before, "a fused optimizer op fell back to the CPU"
    _check_close(cpu, tpu)
    # One update program for all 6 parameters (+ one _foreach_add_ of the Adam step counters).
    per_step = 1 if cls is torch.optim.SGD else 2
    assert tpu[3][2:] == [per_step] * 8, tpu[3]


@pytest.mark.parametrize("cls,kw", [CONFIGS[0], CONFIGS[4], CONFIGS[6]],
                         ids=lambda c: getattr(c, "__name__", str(c)))
@pytest.mark.parametrize("lr_tensor", [False, True])
def test_changing_lr_compiles_nothing(cls, kw, lr_tensor):
    cpu = _train("cpu", cls, kw, lr_tensor=lr_tensor, change_lr_at=3)
    tpu = _train("tpu", cls, kw, lr_tensor=lr_tensor, change_lr_at=3)
    _check_close(cpu, tpu)
    assert sum(tpu[4][2:]) == 0, f"compiles per step: {tpu[4]}"


@pytest.mark.parametrize("cls,kw", [CONFIGS[1], CONFIGS[3], CONFIGS[6]],
                         ids=lambda c: getattr(c, "__name__", str(c)))
def test_fused_with_grad_scaler_matches_cpu(cls, kw):
    """grad_scale/found_inf: scaled gradients unscaled inside the fused step; an inf skips it."""

    def run(dev):
        scaler = torch.amp.GradScaler(dev, init_scale=2.0**8, growth_interval=2)
        orig = nn.Linear.forward

        def forward(self, x, _n=[0]):
            out = orig(self, x)
            _n[0] += 1
            # The 13th linear call (step 4's first layer) overflows: that step is skipped.
            return out * float("inf") if _n[0] == 13 else out

        nn.Linear.forward = forward
        try:
            return _train(dev, cls, kw, scaler=scaler), scaler.get_scale()
        finally:
            nn.Linear.forward = orig

    before = fallback_counts()
    (cpu, s_cpu), (tpu, s_tpu) = run("cpu"), run("tpu")
    assert fallback_counts() == before
    assert s_cpu == s_tpu
    for a, b in zip(cpu[1], tpu[1]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.tensor(tpu[0][:4] + tpu[0][5:]),
                               torch.tensor(cpu[0][:4] + cpu[0][5:]), rtol=1e-5, atol=1e-5)
    assert tpu[2].state_dict()["state"][0].get("step", torch.tensor(0.0)).item() == \
        cpu[2].state_dict()["state"][0].get("step", torch.tensor(0.0)).item()


def test_fused_adam_half_params_match_cpu():
    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float16, torch.bfloat16):
        ps = [torch.randn(5, 3, generator=gen).to(dtype) for _ in range(2)]
        gs = [torch.randn(5, 3, generator=gen).to(dtype) for _ in range(2)]
        res = {}
        for dev in ("cpu", "tpu"):
            params = [p.clone().to(dev).requires_grad_() for p in ps]
            opt = torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, fused=True)
            for _ in range(3):
                for p, g in zip(params, gs):
                    p.grad = g.to(dev)
                opt.step()
            res[dev] = [p.detach().cpu() for p in params]
        for a, b in zip(res["cpu"], res["tpu"]):
            torch.testing.assert_close(b, a, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD])
def test_compiled_optimizer_step_matches_cpu(cls):
    # torch.compile(opt.step): a non-capturable optimizer keeps its step counts in 0-d CPU
    # tensors, which the compiled graph mutates; they are written back after each run.
    torch.manual_seed(0)
    kw = {"lr": 1e-2, "momentum": 0.9} if cls is torch.optim.SGD else {"lr": 1e-2}
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    mt = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to("tpu")
    mt.load_state_dict(m.state_dict())
    opt = cls(m.parameters(), **kw)
    optt = cls(mt.parameters(), foreach=True, **kw)
    step = torch.compile(optt.step, backend="tpu")
    x = torch.randn(5, 8)
    for _ in range(4):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        optt.zero_grad()
        mt(x.to("tpu")).pow(2).mean().backward()
        step()
    for p, pt in zip(m.parameters(), mt.parameters()):
        torch.testing.assert_close(pt.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    if cls is not torch.optim.SGD:
        steps = [s["step"] for s in optt.state.values()]
        assert all(s.device.type == "cpu" and float(s) == 4.0 for s in steps), steps
