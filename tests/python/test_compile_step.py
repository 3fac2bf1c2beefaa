"""torchtpu.compile_step: a whole train step (forward, backward, clipping, optimizer update,
zero_grad) as ONE program per call, with the results, `.grad` fields and optimizer state of CPU
PyTorch running the same step eagerly."""

import pytest
import torch
import torch.nn as nn

import torchtpu


def _model(dev):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4)).to(dev)


def _batches(n):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 8, generator=gen), torch.randn(6, 4, generator=gen)) for _ in range(n)]


def _executions():
    return torchtpu.metrics()["executions"]


def _close(cpu, tpu, what):
    torch.testing.assert_close(tpu.detach().cpu(), cpu.detach(), rtol=1e-4, atol=1e-5, msg=what)


def _check_state(m_cpu, o_cpu, m_tpu, o_tpu):
    for (name, p_cpu), p_tpu in zip(m_cpu.named_parameters(), m_tpu.parameters()):
        _close(p_cpu, p_tpu, f"parameter {name}")
        assert (p_cpu.grad is None) == (p_tpu.grad is None), f".grad of {name}"
        if p_cpu.grad is not None:
            _close(p_cpu.grad, p_tpu.grad, f".grad of {name}")
        st_cpu, st_tpu = o_cpu.state[p_cpu], o_tpu.state[p_tpu]
        assert st_cpu.keys() == st_tpu.keys(), f"optimizer state keys of {name}"
        for k in st_cpu:
            _close(torch.as_tensor(st_cpu[k]), st_tpu[k], f"optimizer state {k} of {name}")


def _step_fn(model, opt, clip):
    def step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss

    return step


@pytest.mark.parametrize("make_opt", [
    lambda params, lr: torch.optim.AdamW(params, lr=lr, weight_decay=0.1),
    lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
], ids=["adamw", "sgd-momentum"])
def test_train_step_is_one_program_and_matches_cpu(make_opt):
    m_cpu, m_tpu = _model("cpu"), _model("tpu")
    o_cpu = make_opt(m_cpu.parameters(), 0.01)
    o_tpu = make_opt(m_tpu.parameters(), torch.tensor(0.01, device="tpu"))
    step_cpu = _step_fn(m_cpu, o_cpu, clip=0.5)
    step_tpu = torchtpu.compile_step(_step_fn(m_tpu, o_tpu, clip=0.5), m_tpu, o_tpu)
    for i, (x, y) in enumerate(_batches(5)):
        loss_cpu = step_cpu(x, y)
        before = _executions()
        loss_tpu = step_tpu(x.to("tpu"), y.to("tpu"))
        assert _executions() - before == 1, f"step {i} ran {_executions() - before} programs"
        _close(loss_cpu, loss_tpu, f"loss of step {i}")
        _check_state(m_cpu, o_cpu, m_tpu, o_tpu)
    # First call (no .grad, no optimizer state yet) and the steady state: two signatures.
    assert step_tpu.num_signatures == 2


def test_lr_scheduler_with_tensor_lr_does_not_retrace():
    m_cpu, m_tpu = _model("cpu"), _model("tpu")
    o_cpu = torch.optim.SGD(m_cpu.parameters(), lr=0.1)
    o_tpu = torch.optim.SGD(m_tpu.parameters(), lr=torch.tensor(0.1, device="tpu"))
    s_cpu = torch.optim.lr_scheduler.StepLR(o_cpu, step_size=1, gamma=0.5)
    s_tpu = torch.optim.lr_scheduler.StepLR(o_tpu, step_size=1, gamma=0.5)
    step_cpu = _step_fn(m_cpu, o_cpu, clip=None)
    step_tpu = torchtpu.compile_step(_step_fn(m_tpu, o_tpu, clip=None), m_tpu, o_tpu)
    for i, (x, y) in enumerate(_batches(4)):
        _close(step_cpu(x, y), step_tpu(x.to("tpu"), y.to("tpu")), f"loss of step {i}")
        s_cpu.step()
        s_tpu.step()
        _check_state(m_cpu, o_cpu, m_tpu, o_tpu)
    assert o_tpu.param_groups[0]["lr"].item() == pytest.approx(0.1 * 0.5 ** 4)
    assert step_tpu.num_signatures == 2  # the learning rate is a program input


def test_gradient_accumulation_across_calls():
    m_cpu, m_tpu = _model("cpu"), _model("tpu")
    o_cpu = torch.optim.AdamW(m_cpu.parameters(), lr=0.01)
    o_tpu = torch.optim.AdamW(m_tpu.parameters(), lr=torch.tensor(0.01, device="tpu"))

    def accumulate_fn(model):
        def accumulate(x, y):
            loss = nn.functional.mse_loss(model(x), y) / 2
            loss.backward()
            return loss
        return accumulate

    def apply_fn(opt):
        def apply():
            opt.step()
            opt.zero_grad()
        return apply

    acc_tpu = torchtpu.compile_step(accumulate_fn(m_tpu), m_tpu)
    apply_tpu = torchtpu.compile_step(apply_fn(o_tpu), m_tpu, o_tpu)
    batches = _batches(6)
    for i in range(0, 6, 2):
        for x, y in batches[i:i + 2]:
            loss_cpu = accumulate_fn(m_cpu)(x, y)
            before = _executions()
            loss_tpu = acc_tpu(x.to("tpu"), y.to("tpu"))
            assert _executions() - before == 1
            _close(loss_cpu, loss_tpu, f"loss of micro-batch {i}")
            for p_cpu, p_tpu in zip(m_cpu.parameters(), m_tpu.parameters()):
                _close(p_cpu.grad, p_tpu.grad, "accumulated .grad")
        apply_fn(o_cpu)()
        before = _executions()
        assert apply_tpu() is None
        assert _executions() - before == 1
        _check_state(m_cpu, o_cpu, m_tpu, o_tpu)
        assert all(p.grad is None for p in m_tpu.parameters())


def test_python_value_arguments_pick_the_program():
    m_cpu, m_tpu = _model("cpu"), _model("tpu")

    def fn(model):
        def run(x, scale):
            return model(x) * scale
        return run

    step = torchtpu.compile_step(fn(m_tpu), m_tpu)
    x = torch.randn(3, 8)
    for scale in (2.0, 3.0, 2.0):
        _close(fn(m_cpu)(x, scale), step(x.to("tpu"), scale), f"scale {scale}")
    assert step.num_signatures == 2


def test_buffers_and_eval_mode():
    def make(dev):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2)).to(dev)

    m_cpu, m_tpu = make("cpu"), make("tpu")
    o_cpu = torch.optim.SGD(m_cpu.parameters(), lr=0.1)
    o_tpu = torch.optim.SGD(m_tpu.parameters(), lr=torch.tensor(0.1, device="tpu"))

    def fn(model, opt):
        def step(x):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        return step

    step = torchtpu.compile_step(fn(m_tpu, o_tpu), m_tpu, o_tpu)
    gen = torch.Generator().manual_seed(2)
    for i, training in enumerate((True, True, False, True)):
        m_cpu.train(training)
        m_tpu.train(training)
        x = torch.randn(5, 4, generator=gen)
        _close(fn(m_cpu, o_cpu)(x), step(x.to("tpu")), f"loss of step {i} (training={training})")
        _check_state(m_cpu, o_cpu, m_tpu, o_tpu)
        for b_cpu, b_tpu in zip(m_cpu.buffers(), m_tpu.buffers()):
            _close(b_cpu, b_tpu, "BatchNorm running statistics")
    assert step.num_signatures == 2  # training and eval (.grad is None before every call)


def test_bad_input_raises_clear_errors():
    m = _model("tpu")
    with pytest.raises(TypeError, match="nn.Module or torch.optim.Optimizer"):
        torchtpu.compile_step(lambda: None, "not a module")

    def reads_host(x):
        loss = m(x).sum()
        if loss.item() > 0:  # a host read: one program cannot depend on it
            return loss
        return -loss

    with pytest.raises(RuntimeError, match="reads a tensor's value on the host"):
        torchtpu.compile_step(reads_host, m)(torch.randn(2, 8, device="tpu"))
    with pytest.raises(ValueError, match="cpu"):
        torchtpu.compile_step(lambda x: m(x), m)(torch.randn(2, 8))
    # The process and the model stay usable.
    out = torchtpu.compile_step(lambda x: m(x), m)(torch.randn(2, 8, device="tpu"))
    assert out.shape == (2, 4)
