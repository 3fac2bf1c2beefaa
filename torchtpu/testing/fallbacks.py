"""Test helpers shared by the op test files: which ops ran through the CPU fallback, and
deterministic sample tensors of any dtype."""

from __future__ import annotations

import torch

import torchtpu


def fallback_counts() -> dict:
    """CPU-fallback calls so far, by aten op (or under "<all>" when per-op counts are off)."""
    m = torchtpu.metrics()
    by_op = m.get("cpu_fallbacks_by_op")
    return dict(by_op) if by_op is not None else {"<all>": m.get("cpu_fallbacks", 0)}


def base_op_name(name: str) -> str:
    """aten::add_.Tensor -> add: the functional op name, without namespace or overload."""
    name = name.split("::")[-1].split(".")[0]
    return name[:-1] if name.endswith("_") else name


def new_fallbacks(before: dict, own_ops: set | None = None) -> dict:
    """Fallback calls since `before` (a fallback_counts() result); with `own_ops`, only those
    ops (by base_op_name)."""
    grown = {k: v - before.get(k, 0) for k, v in fallback_counts().items()
             if v != before.get(k, 0)}
    if own_ops is None:
        return grown
    return {k: v for k, v in grown.items() if k == "<all>" or base_op_name(k) in own_ops}


def make(shape, dtype: torch.dtype, seed: int = 0, low: int = -3, high: int = 4) -> torch.Tensor:
    """A reproducible CPU tensor: normal floats, integers in [low, high), random bools."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def assert_close_to_cpu(actual, expected, rtol: float, atol: float) -> None:
    """A tpu result (tensor or nested tuple/list of them) against the CPU's; NaN equals NaN."""
    if isinstance(expected, (tuple, list)):
        for a, e in zip(actual, expected):
            assert_close_to_cpu(a, e, rtol, atol)
        return
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, rtol=rtol, atol=atol)


def check_against_cpu(fn, *inputs: torch.Tensor, grad: bool = True, rtol: float, atol: float,
                      grad_rtol: float | None = None, grad_atol: float | None = None) -> None:
    """fn on tpu copies of the CPU `inputs` matches fn on the CPU; with `grad`, so do the
    gradients of the sum of its floating-point outputs with respect to every input."""
    assert_close_to_cpu(fn(*[x.to("tpu") for x in inputs]), fn(*inputs), rtol, atol)
    if not grad:
        return
    cpu = [x.clone().requires_grad_() for x in inputs]
    dev = [x.to("tpu").requires_grad_() for x in inputs]

    def total(out):
        out = out if isinstance(out, (tuple, list)) else (out,)
        return sum(o.sum() for o in out if o.is_floating_point())

    g_cpu = torch.autograd.grad(total(fn(*cpu)), cpu)
    g_dev = torch.autograd.grad(total(fn(*dev)), dev)
    for a, e in zip(g_dev, g_cpu):
        torch.testing.assert_close(a.cpu(), e, rtol=rtol if grad_rtol is None else grad_rtol,
                                   atol=atol if grad_atol is None else grad_atol)
