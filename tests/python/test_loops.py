"""Ops lowered with a stablehlo.while: gcd and lcm (elementwise Euclid) and ctc_loss (alpha and
beta recursions over time), against CPU PyTorch and with no CPU fallback."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchtpu.testing.fallbacks import fallback_counts, make, new_fallbacks

DEV = "tpu"

INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


def _edge_values(dtype, op):
    info = torch.iinfo(dtype)
    lo = info.min
    # lcm(INT_MIN, ...) divides INT_MIN by -1 on the CPU, which traps for 32/64-bit ints.
    if op is torch.lcm and dtype in (torch.int32, torch.int64):
        lo += 1
    vals = [lo, info.max, 0, 1, 2, 6, 12, 35, 14, 100, info.max - 1]
    if info.min < 0:
        vals += [-1, -6, -12, -100, lo + 1]
    return torch.tensor(vals, dtype=dtype)


@pytest.mark.parametrize("op", [torch.gcd, torch.lcm], ids=["gcd", "lcm"])
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_gcd_lcm_edge_values(op, dtype):
    vals = _edge_values(dtype, op)
    # Every pair of edge values, both ways round.
    a = vals.repeat_interleave(len(vals))
    b = vals.repeat(len(vals))
    before = fallback_counts()
    got = op(a.to(DEV), b.to(DEV)).cpu()
    assert new_fallbacks(before) == {}
    expected = op(a, b)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)


@pytest.mark.parametrize("op", [torch.gcd, torch.lcm], ids=["gcd", "lcm"])
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_gcd_lcm_random_broadcast(op, dtype):
    info = torch.iinfo(dtype)
    high = min(info.max, 5000)
    low = 0 if info.min == 0 else -high
    a = make((5, 1, 7), dtype, seed=1, low=low, high=high)
    b = make((3, 7), dtype, seed=2, low=low, high=high)
    before = fallback_counts()
    got = op(a.to(DEV), b.to(DEV)).cpu()
    assert new_fallbacks(before) == {}
    assert torch.equal(got, op(a, b))


def test_gcd_lcm_mixed_dtypes_inplace_out_and_empty():
    a = make((6,), torch.int8, seed=3, low=-50, high=50)
    b = make((6,), torch.int64, seed=4, low=-1000, high=1000)
    before = fallback_counts()
    got = torch.gcd(a.to(DEV), b.to(DEV)).cpu()
    assert got.dtype == torch.int64
    assert torch.equal(got, torch.gcd(a, b))
    x = b.clone().to(DEV)
    x.lcm_(a.to(DEV))
    assert torch.equal(x.cpu(), torch.lcm(b, a))
    out = torch.empty(6, dtype=torch.int64, device=DEV)
    torch.gcd(b.to(DEV), b.flip(0).to(DEV), out=out)
    assert torch.equal(out.cpu(), torch.gcd(b, b.flip(0)))
    e = torch.empty(0, 3, dtype=torch.int32)
    assert torch.gcd(e.to(DEV), e.to(DEV)).cpu().shape == (0, 3)
    assert new_fallbacks(before) == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
@pytest.mark.parametrize("op", [torch.gcd, torch.lcm], ids=["gcd", "lcm"])
def test_gcd_lcm_reject_non_integer(op, dtype):
    x = make((3,), dtype)
    with pytest.raises(RuntimeError, match=op.__name__):
        op(x, x)
    # PyTorch's own meta function for lcm rejects bool before the lowering runs, with a
    # message that does not name the op (the same on device="meta").
    name = None if (op is torch.lcm and dtype == torch.bool) else op.__name__
    with pytest.raises(RuntimeError, match=name):
        op(x.to(DEV), x.to(DEV)).cpu()
