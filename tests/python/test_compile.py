"""torch.compile(backend="tpu"): compiled results match eager, graphs compile once per input
signature, and the whole train step runs as compiled programs."""

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import torchtpu
from conftest import new_graphs
from torchtpu import _dynamo as tpu_dynamo

DEV = "tpu"


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def test_backend_is_registered():
    assert "tpu" in torch._dynamo.list_backends()


def test_compiled_mlp_forward_and_backward_match_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4)).to(DEV)
    x = torch.randn(3, 8).to(DEV)
    before = set(tpu_dynamo.graph_metrics())
    compiled = torch.compile(model, backend="tpu")
    out_c = compiled(x)
    out_e = model(x)
    torch.testing.assert_close(out_c.cpu(), out_e.cpu())
    out_c.sum().backward()
    grads_c = [p.grad.cpu().clone() for p in model.parameters()]
    model.zero_grad()
    out_e.sum().backward()
    for gc, p in zip(grads_c, model.parameters()):
        torch.testing.assert_close(gc, p.grad.cpu())
    graphs = new_graphs(before)
    assert graphs and all("eager_reason" not in g for g in graphs.values()), graphs


def test_identical_signature_compiles_nothing_new_shape_compiles_once():
    model = nn.Linear(4, 4).to(DEV)
    compiled = torch.compile(model, backend="tpu")
    with torch.no_grad():
        compiled(torch.randn(2, 4).to(DEV))
        n = torchtpu.metrics()["programs_compiled"]
        for _ in range(3):
            compiled(torch.randn(2, 4).to(DEV))
        assert torchtpu.metrics()["programs_compiled"] == n
        y = compiled(torch.randn(5, 4).to(DEV))
        assert y.shape == (5, 4)


def _train_step(model, opt, x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss


def test_compiled_train_step_matches_eager_over_steps_and_lr_change_does_not_recompile():
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    m_e, m_c = copy.deepcopy(base).to(DEV), copy.deepcopy(base).to(DEV)
    # A tensor learning rate is a runtime value: changing it never recompiles.
    opt_e = torch.optim.AdamW(m_e.parameters(), lr=torch.tensor(1e-2).to(DEV), foreach=True,
                              capturable=True)
    opt_c = torch.optim.AdamW(m_c.parameters(), lr=torch.tensor(1e-2).to(DEV), foreach=True,
                              capturable=True)
    for opt in (opt_e, opt_c):
        opt.param_groups[0]["lr"].fill_(1e-2)  # warms the eager fill_ used for the change below
    step = torch.compile(_train_step, backend="tpu")
    before = set(tpu_dynamo.graph_metrics())
    data = [(torch.randn(4, 8).to(DEV), torch.randn(4, 4).to(DEV)) for _ in range(4)]
    compiled_after_warmup = None
    for i in range(20):
        x, y = data[i % 4]
        if i == 10:
            for opt in (opt_e, opt_c):
                opt.param_groups[0]["lr"].fill_(5e-3)
        le = _train_step(m_e, opt_e, x, y).item()
        lc = step(m_c, opt_c, x, y).item()
        assert abs(le - lc) <= 1e-5 * max(1.0, abs(le)), (i, le, lc)
        if i == 2:
            compiled_after_warmup = torchtpu.metrics()["programs_compiled"]
    for pe, pc in zip(m_e.parameters(), m_c.parameters()):
        torch.testing.assert_close(pc.cpu(), pe.cpu(), rtol=1e-5, atol=1e-6)
    graphs = new_graphs(before)
    assert graphs and all("eager_reason" not in g for g in graphs.values()), graphs
    # Steady state (including the learning-rate change) compiles nothing: only the eager
    # baseline's own ops could, and those were warm after step 2 as well.
    assert torchtpu.metrics()["programs_compiled"] == compiled_after_warmup


def test_inference_graph_with_buffer_mutation_matches_eager():
    torch.manual_seed(0)
    bn_e = nn.BatchNorm1d(6).to(DEV)
    bn_c = copy.deepcopy(bn_e)
    compiled = torch.compile(bn_c, backend="tpu")
    for _ in range(3):
        x = torch.randn(5, 6).to(DEV)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x).cpu(), bn_e(x).cpu())
    torch.testing.assert_close(bn_c.running_mean.cpu(), bn_e.running_mean.cpu())
    torch.testing.assert_close(bn_c.running_var.cpu(), bn_e.running_var.cpu())


def test_unsupported_graph_runs_eagerly_with_a_reason():
    def f(x):
        return torch.linalg.cholesky(x @ x.mT + torch.eye(3, device=x.device))

    x = torch.randn(3, 3).to(DEV)
    before = set(tpu_dynamo.graph_metrics())
    out = torch.compile(f, backend="tpu")(x)
    torch.testing.assert_close(out.cpu(), f(x.cpu()), rtol=1e-4, atol=1e-5)
    graphs = new_graphs(before)
    assert any("eager_reason" in g for g in graphs.values()), graphs


def test_log_compiles_names_the_graph():
    code = (
        "import torch, torchtpu\n"
        "f = torch.compile(lambda x: (x * 2).sin(), backend='tpu')\n"
        "f(torch.ones(3).to('tpu')); f(torch.ones(4).to('tpu'))\n"
    )
    env = dict(os.environ, TORCHTPU_LOG_COMPILES="1", TORCHTPU_CACHE="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.startswith("torchtpu: compiled graph")]
    assert len(lines) >= 2, r.stderr
    assert "Float[3]" in lines[0] and "first call" in lines[0]
    # The new size recompiles (Dynamo marks the graph dynamic; we specialize it per size).
    assert "Float[4]" in lines[-1]


def test_dynamic_true_specializes_per_size():
    f = torch.compile(lambda x, y: (x @ y).relu().sum(0), backend="tpu", dynamic=True)
    for n in (3, 5, 3):
        x, y = torch.randn(n, 4), torch.randn(4, 2)
        torch.testing.assert_close(f(x.to(DEV), y.to(DEV)).cpu(), (x @ y).relu().sum(0))


def test_graph_with_empty_permuted_compiles():
    # Transformers' MoE dispatch allocates with empty_permuted inside compiled forwards.
    def f(x):
        y = torch.empty_permuted((3, 4), (1, 0), device=x.device)
        y.copy_(x * 2)
        return y + 1

    x = torch.randn(3, 4)
    before = set(tpu_dynamo.graph_metrics())
    out = torch.compile(f, backend="tpu")(x.to(DEV))
    torch.testing.assert_close(out.cpu(), f(x))
    graphs = new_graphs(before)
    assert graphs and not any("eager_reason" in g for g in graphs.values()), graphs


def test_graph_with_dtype_views_compiles():
    # vLLM's tpu runner uploads one int32 buffer per step that carries float32 words too.
    def f(words, bytes_):
        return (words[:2].long() * 2, words[2:].view(torch.float32) * 3,
                words[2:].view(torch.int8), words[2:].view(torch.bfloat16),
                bytes_.view(torch.float32) + 1)

    words = torch.tensor([1, 2] + torch.tensor([1.5, -2.0]).view(torch.int32).tolist(),
                         dtype=torch.int32)
    bytes_ = torch.arange(16, dtype=torch.int8).reshape(2, 8)
    before = set(tpu_dynamo.graph_metrics())
    got = torch.compile(f, backend="tpu")(words.to(DEV), bytes_.to(DEV))
    graphs = new_graphs(before)
    assert graphs and not any("eager_reason" in g for g in graphs.values()), graphs
    for want, out in zip(f(words, bytes_), got):
        assert out.dtype == want.dtype and torch.equal(out.cpu(), want)
