"""Moving an OpInfo sample to a device (aliasing kept, host-only arguments left on the CPU), running
it there with its gradients, and walking the results."""

from __future__ import annotations

from itertools import islice
from typing import Any, Iterable

import torch

from .common import _Skip


def _walk_tensors(obj: Any) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _walk_tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _walk_tensors(x)


def _check_sample(sample) -> None:
    """Raises _Skip for samples the harness cannot move to tpu meaningfully."""
    parts = [sample.input, sample.args, sample.kwargs]
    for t in _walk_tensors(parts):
        if t.dtype in (torch.float64, torch.complex64, torch.complex128, torch.complex32):
            raise _Skip(f"sample has a {str(t.dtype).replace('torch.', '')} tensor")
        if t.layout != torch.strided:
            raise _Skip(f"sample has a {t.layout} tensor")
        if t.is_quantized:
            raise _Skip("sample has a quantized tensor")

    def visit(obj):
        if isinstance(obj, torch.Generator):
            raise _Skip("sample needs a torch.Generator (CPU-only)")
        if isinstance(obj, (list, tuple)):
            for x in obj:
                visit(x)
        elif isinstance(obj, dict):
            for x in obj.values():
                visit(x)

    visit(parts)


def _move(obj: Any, device: str, memo: dict, keep_cpu: frozenset = frozenset(),
          path: tuple = ()) -> Any:
    """A copy of obj with every tensor detached, copied to `device` and made a leaf again (with
    its requires_grad); aliasing between tensors in the sample is kept through `memo`. Tensors
    at the `keep_cpu` paths stay on the CPU (arguments an op requires on the host, such as
    tensor_split's index tensor)."""
    if isinstance(obj, torch.Tensor):
        key = id(obj)
        if key not in memo:
            t = obj.detach().to("cpu" if path in keep_cpu else device, copy=True)
            if obj.requires_grad:
                t.requires_grad_(True)
            memo[key] = t
        return memo[key]
    if isinstance(obj, torch.device):
        return torch.device(device) if obj.type == "cpu" else obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(_move(x, device, memo, keep_cpu, path + (i,))
                           for i, x in enumerate(obj)))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_move(x, device, memo, keep_cpu, path + (i,)) for i, x in enumerate(obj))
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "device" and v == "cpu":
                out[k] = device
            else:
                out[k] = _move(v, device, memo, keep_cpu, path + (k,))
        return out
    return obj


def _host_paths(sample) -> frozenset:
    """Paths (as _move sees them, rooted at 0: input, 1: args, 2: kwargs) of the tensors in a
    sample generated for the meta device that are on the CPU all the same: sample functions
    create tensors the op needs on the host without `device=` (tensor_split's indices)."""
    paths = set()

    def visit(obj, path):
        if isinstance(obj, torch.Tensor):
            if obj.device.type == "cpu":
                paths.add(path)
        elif isinstance(obj, (list, tuple)):
            for i, x in enumerate(obj):
                visit(x, path + (i,))
        elif isinstance(obj, dict):
            for k, v in obj.items():
                visit(v, path + (k,))

    visit(sample.input, (0,))
    visit(sample.args, (1,))
    visit(sample.kwargs, (2,))
    return frozenset(paths)


def _host_only_args(op, dtype, with_grad: bool, n: int) -> list:
    """Per sample, the paths to keep on the CPU, found by generating the samples once more for
    the meta device; empty sets when that fails (then every tensor moves)."""
    try:
        state = torch.random.get_rng_state()
        try:
            metas = list(islice(op.sample_inputs("meta", dtype, requires_grad=with_grad), n))
        finally:
            torch.random.set_rng_state(state)
        return [_host_paths(m) for m in metas]
    except Exception:  # noqa: BLE001 - a sample function that cannot run on meta
        return []


def _upcast(obj: Any, src: torch.dtype, dst: torch.dtype) -> Any:
    if isinstance(obj, torch.Tensor):
        if obj.dtype != src:
            return obj
        t = obj.detach().to(dst)
        return t.requires_grad_(True) if obj.requires_grad else t
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_upcast(x, src, dst) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_upcast(x, src, dst) for x in obj)
    if isinstance(obj, dict):
        return {k: _upcast(v, src, dst) for k, v in obj.items()}
    return obj


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return tuple(_to_cpu(x) for x in obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    return obj


def _float_outputs(obj: Any) -> list[torch.Tensor]:
    return [t for t in _walk_tensors(obj) if t.is_floating_point() and t.requires_grad]


def _grad_leaves(moved_sample_parts: Any) -> list[torch.Tensor]:
    seen, leaves = set(), []
    for t in _walk_tensors(moved_sample_parts):
        if t.requires_grad and t.is_floating_point() and id(t) not in seen:
            seen.add(id(t))
            leaves.append(t)
    return leaves


def _run_sample(op, sample, device: str, with_grad: bool, keep_cpu: frozenset = frozenset(),
                seed: int = 0, on_host: bool = True):
    """Runs `op` on a copy of `sample` on `device`: returns (outputs, grads) on the host; grads
    is None when not checked (no float output needs grad). on_host=False (only without
    gradients) returns the outputs as the op made them, on `device`."""
    memo: dict = {}
    inp = _move(sample.input, device, memo, keep_cpu, (0,))
    args = _move(sample.args, device, memo, keep_cpu, (1,))
    kwargs = _move(sample.kwargs, device, memo, keep_cpu, (2,))
    torch.manual_seed(seed)
    if not with_grad:
        with torch.no_grad():
            out = op(inp, *args, **kwargs)
        return (_to_cpu(out) if on_host else out), None
    out = op(inp, *args, **kwargs)
    leaves = _grad_leaves([inp, args, kwargs])
    processed = sample.output_process_fn_grad(out)
    outs = _float_outputs(processed)
    grads = None
    if leaves and outs:
        total = outs[0].sum()
        for t in outs[1:]:
            total = total + t.sum()
        grads = torch.autograd.grad(total, leaves, allow_unused=True)
        grads = [_to_cpu(g) for g in grads]
    return _to_cpu(out), grads


def _slots(obj: Any) -> list:
    """Tensors and Nones of a (possibly nested) result, in order."""
    if obj is None or isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [s for x in obj for s in _slots(x)]
    if isinstance(obj, dict):
        return [s for k in sorted(obj) for s in _slots(obj[k])]
    return []
