"""Fake-tensor rules for tpu tensors where PyTorch's meta kernel carries another backend's limits.

torch.compile traces with fake tensors, and a fake tensor runs an op's meta kernel, which for
aten._grouped_mm enforces the CUDA kernel's limits (bfloat16 only, 16-byte aligned strides). The
tpu lowering has no such limits (Transformers sends tpu MoE experts through grouped_mm in every
dtype), so for tpu tensors the output comes from torchtpu::grouped_mm's meta kernel instead, the
one eager mode uses. Other devices keep PyTorch's rules (NotImplemented falls through)."""

from __future__ import annotations

import torch


def _grouped_mm_fake(fake_mode, func, *args, **kwargs):
    a = args[0] if args else kwargs.get("self")
    if getattr(getattr(a, "fake_device", None), "type", None) != "tpu":
        return NotImplemented
    with fake_mode:
        return torch.ops.torchtpu.grouped_mm(*args, **kwargs)


def register() -> None:
    try:
        from torch._subclasses.fake_impls import register_op_impl
    except ImportError:  # another torch layout: PyTorch's own meta kernel applies
        return
    op = torch.ops.aten._grouped_mm.default
    register_op_impl(lambda func: func is op)(_grouped_mm_fake)
