"""Every overload form of the fused optimizer ops that PyTorch's CUDA backend registers (in-place,
functional, out=, each with a float and a Tensor lr) has a tpu kernel and gives the CPU's values;
functional forms that return Tensor[] return lists of tensors, as on the CPU (the eager launch
used to push one flat tuple)."""

from __future__ import annotations

import pytest
import torch

import torchtpu  # noqa: F401
from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

FORMS = {
    "_fused_adam": ["_fused_adam_", "_fused_adam_.tensor_lr", "_fused_adam", "_fused_adam.tensor_lr",
                    "_fused_adam.out", "_fused_adam.tensor_lr_out"],
    "_fused_adamw": ["_fused_adamw_", "_fused_adamw_.tensor_lr", "_fused_adamw",
                     "_fused_adamw.tensor_lr", "_fused_adamw.out", "_fused_adamw.tensor_lr_out"],
    "_fused_sgd": ["_fused_sgd_", "_fused_sgd_.tensor_lr", "_fused_sgd", "_fused_sgd.tensor_lr",
                   "_fused_sgd.out", "_fused_sgd.tensor_lr_out"],
}


@pytest.mark.parametrize("name", [n for forms in FORMS.values() for n in forms])
def test_every_fused_optimizer_form_has_a_tpu_kernel(name):
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + name, "PrivateUse1"), name


def state(n=3, seed=0, device="cpu", amsgrad=True):
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 5), (7,), (2, 3, 2)][:n]
    mk = lambda: [torch.randn(s, generator=g) for s in shapes]  # noqa: E731
    params, grads, m, v = mk(), mk(), [x.abs() for x in mk()], [x.abs() for x in mk()]
    vmax = [x + 0.5 for x in v] if amsgrad else []
    steps = [torch.tensor(float(i + 1)) for i in range(n)]
    out = dict(params=params, grads=grads, m=m, v=v, vmax=vmax, steps=steps)
    return {k: [t.to(device) for t in ts] for k, ts in out.items()}


ADAM_KW = dict(beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8, maximize=False)


def adam_args(s, lr, amsgrad):
    return (s["params"], s["grads"], s["m"], s["v"], s["vmax"], s["steps"]), dict(
        lr=lr, amsgrad=amsgrad, **ADAM_KW)


def assert_lists_close(tpu, cpu):
    assert isinstance(tpu, (list, tuple)) and len(tpu) == len(cpu)
    for a, b in zip(tpu, cpu):
        torch.testing.assert_close(a.cpu(), b)


@pytest.mark.parametrize("op", ["_fused_adam", "_fused_adamw"])
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_functional_adam_returns_lists_like_cpu(op, tensor_lr, amsgrad):
    fn = getattr(torch.ops.aten, op)
    results = []
    for device in ("cpu", "tpu"):
        s = state(device=device, amsgrad=amsgrad)
        args, kw = adam_args(s, torch.tensor(0.01, device=device) if tensor_lr else 0.01, amsgrad)
        before = fallback_counts()
        r = (fn.tensor_lr if tensor_lr else fn.default)(*args, **kw)
        if device == "tpu":
            assert not new_fallbacks(before)
        results.append((r, s))
    (tpu, s_tpu), (cpu, s_cpu) = results[1], results[0]
    assert isinstance(tpu, tuple) and len(tpu) == len(cpu) == 5
    for t, c in zip(tpu, cpu):
        assert isinstance(t, list), type(t)
        assert_lists_close(t, c)
    # Functional: the inputs are unchanged.
    assert_lists_close(s_tpu["params"], s_cpu["params"])
    assert_lists_close(s_tpu["params"], state()["params"])


@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
def test_functional_sgd_returns_lists_like_cpu(tensor_lr):
    results = []
    for device in ("cpu", "tpu"):
        s = state(device=device)
        lr = torch.tensor(0.1, device=device) if tensor_lr else 0.1
        fn = torch.ops.aten._fused_sgd.tensor_lr if tensor_lr else torch.ops.aten._fused_sgd.default
        results.append(fn(s["params"], s["grads"], s["m"], weight_decay=0.01, momentum=0.9, lr=lr,
                          dampening=0.0, nesterov=True, maximize=False, is_first_step=False))
    cpu, tpu = results
    assert isinstance(tpu, tuple) and len(tpu) == 3
    for t, c in zip(tpu, cpu):
        assert isinstance(t, list)
        assert_lists_close(t, c)


@pytest.mark.parametrize("op", ["_fused_adam", "_fused_adamw"])
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
def test_adam_out_forms_match_cpu(op, tensor_lr):
    fn = getattr(torch.ops.aten, op)
    got = {}
    for device in ("cpu", "tpu"):
        s = state(device=device)
        out = [torch.empty(0, device=device) for _ in s["params"]]
        args, kw = adam_args(s, torch.tensor(0.01, device=device) if tensor_lr else 0.01, True)
        before = fallback_counts()
        (fn.tensor_lr_out if tensor_lr else fn.out)(*args, **kw, out=out)
        if device == "tpu":
            assert not new_fallbacks(before)
        got[device] = (out, s)
    (out_t, s_t), (out_c, s_c) = got["tpu"], got["cpu"]
    assert_lists_close(out_t, out_c)  # the updated parameters
    fresh = state()
    for k in ("params", "grads", "m", "v", "vmax"):  # all unchanged, as on the CPU
        assert_lists_close(s_t[k], s_c[k])
        assert_lists_close(s_t[k], fresh[k])


@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
def test_sgd_out_forms_match_cpu(tensor_lr):
    got = {}
    for device in ("cpu", "tpu"):
        s = state(device=device)
        out = [torch.empty(0, device=device) for _ in s["params"]]
        lr = torch.tensor(0.1, device=device) if tensor_lr else 0.1
        fn = torch.ops.aten._fused_sgd.tensor_lr_out if tensor_lr else torch.ops.aten._fused_sgd.out
        fn(s["params"], s["grads"], s["m"], weight_decay=0.01, momentum=0.9, lr=lr, dampening=0.0,
           nesterov=False, maximize=True, is_first_step=True, out=out)
        got[device] = (out, s)
    (out_t, s_t), (out_c, s_c) = got["tpu"], got["cpu"]
    assert_lists_close(out_t, out_c)
    fresh = state()
    for k in ("params", "grads", "m"):
        assert_lists_close(s_t[k], s_c[k])
        assert_lists_close(s_t[k], fresh[k])


def test_out_form_with_the_wrong_number_of_outputs_raises():
    s = state(device="tpu")
    args, kw = adam_args(s, 0.01, True)
    with pytest.raises(RuntimeError, match="out"):
        torch.ops.aten._fused_adam.out(*args, **kw, out=[torch.empty(0, device="tpu")])


def test_functional_amp_unscale_returns_a_list_like_cpu():
    results = []
    for device in ("cpu", "tpu"):
        xs = [torch.tensor([1.0, 2.0], device=device), torch.tensor([float("inf")], device=device)]
        found = torch.zeros((), device=device)
        inv = torch.full((), 0.5, device=device)
        results.append(torch.ops.aten._amp_foreach_non_finite_check_and_unscale(xs, found, inv))
    cpu, tpu = results
    assert isinstance(tpu, tuple) and len(tpu) == 2
    assert isinstance(tpu[0], list) and len(tpu[0]) == 2
    assert_lists_close(tpu[0], cpu[0])
    torch.testing.assert_close(tpu[1].cpu(), cpu[1])


WARM_RESTART = """
import torch, torchtpu

def grouping(r):
    return [len(x) if isinstance(x, list) else -1 for x in r]

ps = [torch.randn(4, device="tpu") for _ in range(2)]
gs = [torch.randn(4, device="tpu") for _ in range(2)]
ms = [torch.zeros(4, device="tpu") for _ in range(2)]
vs = [torch.zeros(4, device="tpu") for _ in range(2)]
steps = [torch.ones((), device="tpu") for _ in range(2)]
r = torch.ops.aten._fused_adam(ps, gs, ms, vs, [], steps, lr=0.01, beta1=0.9, beta2=0.99,
                               weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
print("ADAM", grouping(r))
found = torch.tensor(0.0, device="tpu")
u = torch.ops.aten._amp_foreach_non_finite_check_and_unscale(gs, found, torch.ones((), device="tpu"))
print("UNSCALE", grouping(u))
print("RECIPE_HITS", torchtpu.metrics()["disk_cache_signature_hits"])
"""


def test_a_warm_process_returns_lists_too(run_python, tmp_path):
    # A second process reaches the programs through their signature recipes (no meta inference):
    # the recipe must say how the outputs group into Tensor[] returns, or the warm process got a
    # flat tuple of tensors where the cold one got lists.
    env = dict(TORCHTPU_CACHE="1", TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    cold = run_python(WARM_RESTART, **env).stdout
    warm = run_python(WARM_RESTART, **env).stdout
    for out in (cold, warm):
        assert "ADAM [2, 2, 2, 2, 0]" in out, out
        assert "UNSCALE [2, -1]" in out, out
    assert "RECIPE_HITS 0" not in warm, warm
