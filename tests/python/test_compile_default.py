"""torch.compile(model) with no backend argument: graphs on tpu tensors go to torchtpu's backend
(one XLA program per graph, the same lowering table and caches as backend="tpu") and match
eager PyTorch on the CPU; graphs on CPU tensors still go to Inductor."""

import copy
import logging

import pytest
import torch
import torch.nn as nn

import torchtpu
from conftest import new_graphs
from torchtpu import _dynamo as tpu_dynamo

DEV = "tpu"
# Loose enough for a few optimizer steps in half precision (CPU and XLA round and accumulate
# products differently), tight enough in float32 to catch a wrong update (off by O(lr)). Adam
# divides by sqrt(v): where a gradient is at rounding level its sign, and so an O(lr) step, can
# differ between two correct half-precision runs, so half-precision Adam gets lr as atol.
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
       torch.float16: dict(atol=5e-3, rtol=5e-3)}
ADAM_HALF_TOL = dict(atol=2e-2, rtol=2e-2)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _assert_compiled_natively(before):
    graphs = new_graphs(before)
    assert graphs, "no tpu graph was compiled: torch.compile did not reach torchtpu's backend"
    assert all("eager_reason" not in g for g in graphs.values()), graphs


def test_function_with_default_backend_matches_cpu():
    f = torch.compile(lambda x: (x * 2).relu().sum())
    x = torch.randn(8)
    before = set(tpu_dynamo.graph_metrics())
    torch.testing.assert_close(f(x.to(DEV)).cpu(), (x * 2).relu().sum())
    _assert_compiled_natively(before)


def test_cpu_graphs_still_go_to_inductor(monkeypatch):
    # The routing decision is made per graph: a CPU graph must reach Inductor, not torchtpu.
    calls = []
    import torch._inductor.compile_fx as compile_fx_module

    real = compile_fx_module.compile_fx
    monkeypatch.setattr(compile_fx_module, "compile_fx",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    before = set(tpu_dynamo.graph_metrics())
    f = torch.compile(lambda x: torch.sin(x) + 1)
    x = torch.randn(5)
    torch.testing.assert_close(f(x), torch.sin(x) + 1)
    assert calls and not new_graphs(before)


def test_graph_creating_tpu_tensors_without_tpu_inputs():
    f = torch.compile(lambda n: torch.arange(n, device=DEV, dtype=torch.float32).cumsum(0))
    before = set(tpu_dynamo.graph_metrics())
    torch.testing.assert_close(f(6).cpu(), torch.arange(6.0).cumsum(0))
    assert new_graphs(before)


def test_dynamic_batch_sizes_match_cpu_and_repeat_without_recompiling():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    m_tpu = copy.deepcopy(model).to(DEV)
    compiled = torch.compile(m_tpu, dynamic=True)
    with torch.no_grad():
        for b in (2, 5, 9):
            x = torch.randn(b, 6)
            torch.testing.assert_close(compiled(x.to(DEV)).cpu(), model(x), atol=1e-5, rtol=1e-5)
        n = torchtpu.metrics()["programs_compiled"]
        for b in (2, 5, 9):
            compiled(torch.randn(b, 6).to(DEV))
        assert torchtpu.metrics()["programs_compiled"] == n


def _linear_model():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


def _conv_model():
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def _batch(kind, dtype):
    g = torch.Generator().manual_seed(1)
    if kind == "linear":
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)
    else:
        x, y = torch.randn(2, 2, 6, 6, generator=g), torch.randn(2, 3, generator=g)
    return x.to(dtype), y.to(dtype)


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    # eps representable in float16 (the default 1e-8 rounds to 0 there, and Adam then divides 0 by
    # 0 on the CPU as well).
    "adam": lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-4),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, eps=1e-4),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_compiled_training_with_default_backend_matches_cpu(kind, opt_name, dtype):
    torch.manual_seed(0)
    base = (_linear_model() if kind == "linear" else _conv_model()).to(dtype)
    m_cpu, m_tpu = copy.deepcopy(base), copy.deepcopy(base).to(DEV)
    opt_cpu, opt_tpu = OPTIMIZERS[opt_name](m_cpu.parameters()), OPTIMIZERS[opt_name](m_tpu.parameters())
    c_tpu = torch.compile(m_tpu)
    x, y = _batch(kind, dtype)
    before = set(tpu_dynamo.graph_metrics())
    for _ in range(3):
        for model, opt, xx, yy in ((m_cpu, opt_cpu, x, y), (c_tpu, opt_tpu, x.to(DEV), y.to(DEV))):
            opt.zero_grad()
            loss = ((model(xx) - yy) ** 2).mean()
            loss.backward()
            opt.step()
    _assert_compiled_natively(before)
    for p_cpu, p_tpu in zip(m_cpu.parameters(), m_tpu.parameters()):
        assert torch.isfinite(p_cpu).all()
        tol = ADAM_HALF_TOL if opt_name != "sgd" and dtype != torch.float32 else TOL[dtype]
        torch.testing.assert_close(p_tpu.cpu(), p_cpu, **tol)


def test_compiled_optimizer_step_with_default_backend():
    torch.manual_seed(0)
    base = _linear_model()
    m_cpu, m_tpu = copy.deepcopy(base), copy.deepcopy(base).to(DEV)
    opt_cpu = torch.optim.AdamW(m_cpu.parameters(), lr=0.01)
    opt_tpu = torch.optim.AdamW(m_tpu.parameters(), lr=0.01)
    step = torch.compile(opt_tpu.step)
    x, y = _batch("linear", torch.float32)
    before = set(tpu_dynamo.graph_metrics())
    for _ in range(2):
        for model, opt, xx, yy, do_step in ((m_cpu, opt_cpu, x, y, opt_cpu.step),
                                            (m_tpu, opt_tpu, x.to(DEV), y.to(DEV), step)):
            opt.zero_grad()
            ((model(xx) - yy) ** 2).mean().backward()
            do_step()
    assert new_graphs(before)
    for p_cpu, p_tpu in zip(m_cpu.parameters(), m_tpu.parameters()):
        torch.testing.assert_close(p_tpu.cpu(), p_cpu, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_modes_compile_natively_and_say_what_they_mean(mode, caplog):
    torch.manual_seed(0)
    model = _linear_model()
    compiled = torch.compile(copy.deepcopy(model).to(DEV), mode=mode)
    x = torch.randn(3, 8)
    before = set(tpu_dynamo.graph_metrics())
    with caplog.at_level(logging.INFO, logger="torchtpu.compile"), torch.no_grad():
        torch.testing.assert_close(compiled(x.to(DEV)).cpu(), model(x), atol=1e-5, rtol=1e-5)
    _assert_compiled_natively(before)


def test_fullgraph_graph_break_raises_and_process_stays_usable():
    def f(x):
        y = x * 2
        print("a graph break")
        return y + 1

    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(f, fullgraph=True)(torch.ones(2, device=DEV))
    g = torch.compile(lambda x: x.exp(), fullgraph=True)
    torch.testing.assert_close(g(torch.zeros(2, device=DEV)).cpu(), torch.ones(2))


def test_aot_inductor_option_is_refused_with_a_clear_error():
    f = torch.compile(lambda x: x + 1, options={"use_aoti": True})
    with pytest.raises(Exception, match="AOTInductor"):
        f(torch.ones(2, device=DEV))


def test_routing_can_be_turned_off(monkeypatch):
    from torchtpu import _inductor_route

    monkeypatch.setenv("TORCHTPU_ROUTE_INDUCTOR", "0")
    assert not _inductor_route.enabled()
    monkeypatch.setenv("TORCHTPU_ROUTE_INDUCTOR", "1")
    assert _inductor_route.enabled()
