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


@pytest.mark.parametrize("make_opt,signatures", [
    (lambda params, lr: torch.optim.AdamW(params, lr=lr, weight_decay=0.1), 1),
    # SGD's momentum buffer starts as a copy of the first gradient: it cannot be made ahead, so
    # the first call has a program of its own.
    (lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9), 2),
], ids=["adamw", "sgd-momentum"])
def test_train_step_is_one_program_and_matches_cpu(make_opt, signatures):
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
    # The first call's .grad fields and AdamW's state are made ahead (zeros, the optimizer's own
    # _init_group), so the first call runs the steady state's program.
    assert step_tpu.num_signatures == signatures


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
    assert step_tpu.num_signatures == 1  # the learning rate is a program input


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


@pytest.mark.parametrize("zero_grad_at", ["start", "end"])
def test_first_call_compiles_the_only_program(zero_grad_at):
    """The state a first call creates (.grad, AdamW's exp_avg/exp_avg_sq/step) is made ahead, so
    call 1 compiles the program every later call runs and later calls compile nothing; the values
    are CPU PyTorch's from the first step on, and nothing runs on the device to make them."""
    m_cpu, m_tpu = _model("cpu"), _model("tpu")
    o_cpu = torch.optim.AdamW(m_cpu.parameters(), lr=0.01, weight_decay=0.1)
    o_tpu = torch.optim.AdamW(m_tpu.parameters(), lr=torch.tensor(0.01, device="tpu"),
                              weight_decay=0.1)

    def fn(model, opt):
        def step(x, y):
            if zero_grad_at == "start":
                opt.zero_grad(set_to_none=False)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            if zero_grad_at == "end":
                opt.zero_grad()
            return loss
        return step

    step_cpu, step_tpu = fn(m_cpu, o_cpu), torchtpu.compile_step(fn(m_tpu, o_tpu), m_tpu, o_tpu)
    compiled = []
    for i, (x, y) in enumerate(_batches(4)):
        before, executions = torchtpu.metrics()["programs_compiled"], _executions()
        _close(step_cpu(x, y), step_tpu(x.to("tpu"), y.to("tpu")), f"loss of step {i}")
        assert _executions() - executions == 1, f"step {i}"
        compiled.append(torchtpu.metrics()["programs_compiled"] - before)
        _check_state(m_cpu, o_cpu, m_tpu, o_tpu)
    assert compiled[1:] == [0, 0, 0], compiled
    assert step_tpu.num_signatures == 1


def test_bad_input_raises_clear_errors():
    m = _model("tpu")
    with pytest.raises(TypeError, match="Optimizer or torch.amp.GradScaler objects"):
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


@pytest.mark.parametrize("unscale_and_clip,autocast", [(False, False), (True, False), (True, True)],
                         ids=["step", "unscale-clip-step", "float16-autocast"])
def test_grad_scaler_skips_non_finite_steps_like_cpu(unscale_and_clip, autocast):
    """GradScaler inside the one program: scale, backward, (unscale_ + clipping), step, update,
    optionally under float16 autocast. Step 3 gets an inf input, so its gradients are not finite:
    CPU skips optimizer.step() and backs the scale off; the program must leave parameters and
    state alone the same way."""
    tol = {"rtol": 2e-3, "atol": 2e-3} if autocast else {"rtol": 1e-4, "atol": 1e-5}
    m_cpu, m_tpu = _model("cpu"), _model("tpu")
    o_cpu = torch.optim.AdamW(m_cpu.parameters(), lr=0.01)
    o_tpu = torch.optim.AdamW(m_tpu.parameters(), lr=torch.tensor(0.01, device="tpu"))
    s_cpu = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    s_tpu = torch.amp.GradScaler("tpu", init_scale=2.0**8, growth_interval=2)

    def fn(model, opt, scaler):
        dev = "tpu" if scaler is s_tpu else "cpu"

        def step(x, y):
            opt.zero_grad(set_to_none=False)
            with torch.autocast(dev, dtype=torch.float16, enabled=autocast):
                out = model(x)
                assert out.dtype == (torch.float16 if autocast else torch.float32)
                loss = nn.functional.mse_loss(out.float(), y)
            scaler.scale(loss).backward()
            if unscale_and_clip:
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            scaler.step(opt)
            scaler.update()
            return loss
        return step

    step_cpu = fn(m_cpu, o_cpu, s_cpu)
    step_tpu = torchtpu.compile_step(fn(m_tpu, o_tpu, s_tpu), m_tpu, o_tpu, s_tpu)
    for i, (x, y) in enumerate(_batches(6)):
        if i == 3:
            x[0, 0] = float("inf")
        loss_cpu = step_cpu(x, y)
        before = _executions()
        loss_tpu = step_tpu(x.to("tpu"), y.to("tpu"))
        assert _executions() - before == 1, f"step {i} ran {_executions() - before} programs"
        torch.testing.assert_close(loss_tpu.cpu(), loss_cpu, **tol)
        assert s_tpu.get_scale() == s_cpu.get_scale(), f"scale after step {i}"
        assert s_tpu._growth_tracker.item() == s_cpu._growth_tracker.item(), f"tracker, step {i}"
        for (name, p_cpu), p_tpu in zip(m_cpu.named_parameters(), m_tpu.parameters()):
            torch.testing.assert_close(p_tpu.cpu(), p_cpu, **tol, msg=f"{name} after step {i}")
            torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, **tol, equal_nan=True,
                                       msg=f".grad of {name}, step {i}")
            for k, v in o_cpu.state[p_cpu].items():
                torch.testing.assert_close(o_tpu.state[p_tpu][k].cpu(), torch.as_tensor(v), **tol,
                                           msg=f"state {k} of {name}, step {i}")
    # Grew at step 1 (two finite steps), backed off at step 3, grew again at step 5.
    assert s_cpu.get_scale() == 2.0**9
    assert step_tpu.num_signatures == 1


def test_grad_scaler_misuse_raises_clear_errors():
    m = _model("tpu")
    opt = torch.optim.SGD(m.parameters(), lr=torch.tensor(0.1, device="tpu"))
    scaler = torch.amp.GradScaler("tpu")

    def no_update(x):
        scaler.scale(m(x).sum()).backward()
        scaler.step(opt)

    with pytest.raises(RuntimeError, match=r"without calling scaler.update\(\)"):
        torchtpu.compile_step(no_update, m, opt, scaler)(torch.randn(2, 8, device="tpu"))
    with pytest.raises(ValueError, match="GradScaler is for device 'cpu'"):
        torchtpu.compile_step(no_update, m, opt, torch.amp.GradScaler("cpu"))


def test_captured_tensor_is_refused_with_a_clear_error():
    m = _model("tpu")
    captured = torch.randn(2, 8, device="tpu")
    with pytest.raises(ValueError, match="neither an argument of the step nor a parameter"):
        torchtpu.compile_step(lambda: m(captured), m)()
    assert torchtpu.compile_step(lambda x: m(x), m)(captured).shape == (2, 4)


def test_changes_between_calls_are_seen():
    """A call reuses the previous call's input list only while nothing it came from changed:
    frozen parameters, .grad dropped outside the step, a new plain hyperparameter, a parameter
    replaced by another tensor and new optimizer state from load_state_dict all take effect."""
    m_cpu, m_tpu = _model("cpu"), _model("tpu")
    o_cpu = torch.optim.AdamW(m_cpu.parameters(), lr=0.01)
    o_tpu = torch.optim.AdamW(m_tpu.parameters(), lr=torch.tensor(0.01, device="tpu"))

    def fn(model, opt):
        def step(x, y):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    step_cpu, step_tpu = fn(m_cpu, o_cpu), torchtpu.compile_step(fn(m_tpu, o_tpu), m_tpu, o_tpu)

    def both(change):
        change(m_cpu, o_cpu, "cpu")
        change(m_tpu, o_tpu, "tpu")

    def freeze(m, o, dev):
        m[0].weight.requires_grad_(False)
        m[0].weight.grad = None

    def drop_grads(m, o, dev):
        o.zero_grad(set_to_none=True)

    def weight_decay(m, o, dev):
        o.param_groups[0]["weight_decay"] = 0.3

    def replace_param(m, o, dev):
        new = nn.Parameter(torch.full((4,), 0.25, device=dev))
        m[4].bias = new
        o.param_groups[0]["params"][-1] = new
        o.state.pop(next(p for p in o.state if p.shape == (4,) and p is not new), None)

    def reload(m, o, dev):
        sd = o.state_dict()
        o.load_state_dict(sd)

    changes = [None, None, None, freeze, None, drop_grads, None, weight_decay, None,
               replace_param, None, reload, None]
    gen = torch.Generator().manual_seed(3)
    for i, change in enumerate(changes):
        if change is not None:
            both(change)
        x, y = torch.randn(6, 8, generator=gen), torch.randn(6, 4, generator=gen)
        _close(step_cpu(x, y), step_tpu(x.to("tpu"), y.to("tpu")), f"loss of step {i}")
        _check_state(m_cpu, o_cpu, m_tpu, o_tpu)


def test_list_results_of_tensor_list_ops_are_indexed_in_a_compiled_graph():
    """An op returning (Tensor[], Tensor) (the functional form of
    _amp_foreach_non_finite_check_and_unscale_, which GradScaler.unscale_ runs) is indexed twice in
    the graph: getitem of the list, then of each tensor. The graph compiles (it used to fall back to
    eager with "getitem on a single tensor") and matches the CPU, writes into the inputs included."""
    from torchtpu import _dynamo

    def f(g1, g2, found, inv):
        torch._amp_foreach_non_finite_check_and_unscale_([g1, g2], found, inv)
        return g1 + 1, g2 * 2, found

    for second in ([4.0, 5.0], [4.0, float("inf")]):
        inputs = [torch.tensor([1.0, -2.0, 3.0]), torch.tensor(second), torch.zeros(()),
                  torch.tensor(0.5)]
        tpu_inputs = [t.to("tpu") for t in inputs]
        eager_before = len(_dynamo._eager_graphs)
        # Lowered here, not loaded from AOTAutograd's cache (an entry holds a lowering recipe).
        with torch._functorch.config.patch(enable_autograd_cache=False):
            got = torch.compile(f, backend="tpu")(*tpu_inputs)
        want = f(*inputs)
        assert len(_dynamo._eager_graphs) == eager_before, list(_dynamo._eager_graphs)
        for w, g in zip(want, got):
            torch.testing.assert_close(g.cpu(), w)
        for w, g in zip(inputs, tpu_inputs):
            torch.testing.assert_close(g.cpu(), w)


def test_lists_of_0d_tensors_in_a_graph_match_element_by_element():
    """Foreach ops over 0-d tensors (an optimizer's per-parameter step counters and the bias
    corrections made from them) are lowered as one vector op in a graph: the values are the
    element-by-element lowering's bit for bit and the CPU's, and reductions (_foreach_norm) still
    reduce each element alone."""

    def chain(steps, xs):
        steps = torch._foreach_add(steps, 1)
        bc1 = torch._foreach_pow(0.9, steps)
        bc1 = torch._foreach_sub(bc1, 1)
        bc1 = torch._foreach_reciprocal(torch._foreach_neg(bc1))
        bc2 = torch._foreach_sqrt(torch._foreach_neg(torch._foreach_sub(
            torch._foreach_pow(0.999, steps), 1)))
        return (steps + torch._foreach_div(bc1, bc2) + torch._foreach_addcdiv(xs, xs, bc2, 0.5)
                + torch._foreach_norm(xs) + torch._foreach_lerp(xs, steps, 0.25))

    steps = [torch.tensor(float(v)) for v in (0, 1, 9, 99, 12344)]
    xs = [torch.tensor(v) for v in (0.5, -3.0, 1e-3, 7.0, -0.25)]
    tpu_args = ([s.to("tpu") for s in steps], [x.to("tpu") for x in xs])
    compiled = torch.compile(chain, backend="tpu")
    got = compiled(*tpu_args)
    # The same graph on 1-element lists, one element at a time: lowered element by element.
    alone = [compiled([s], [x]) for s, x in zip(*tpu_args)]
    elementwise = [alone[i][k] for k in range(5) for i in range(5)]
    want = chain(steps, xs)
    assert len(got) == len(want) == 25
    for g, e, w in zip(got, elementwise, want):
        assert g.shape == w.shape == ()
        torch.testing.assert_close(g.cpu(), e.cpu(), rtol=0, atol=0)
        torch.testing.assert_close(g.cpu(), w, rtol=1e-6, atol=1e-7)
