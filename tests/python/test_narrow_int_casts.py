"""Float -> narrow integer casts follow CPU PyTorch, which converts through a 32-bit integer:
out-of-range values wrap instead of saturating (XLA's direct convert saturates)."""

from __future__ import annotations

import pytest
import torch

import torchtpu  # noqa: F401

VALUES = [100.0, 150.0, -150.0, 127.0, -128.0, 200.7, 300.0, -1.5, 2.5, -0.5, 70000.0, -40000.5,
          65535.0, -1.0]


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dst", [torch.int8, torch.uint8, torch.int16, torch.int32])
def test_float_to_int_cast_matches_cpu(src, dst):
    t = torch.tensor(VALUES).to(src)
    if src == torch.float16:
        # Stay finite after doubling: casting inf is undefined (CPU's vectorized and scalar
        # kernels disagree with each other there).
        t = t.clamp(-30000, 30000)
    assert torch.equal(t.to("tpu").to(dst).cpu(), t.to(dst))
    # The same cast inside a fused expression.
    assert torch.equal((t.to("tpu") * 2).to(dst).cpu(), (t * 2).to(dst))
