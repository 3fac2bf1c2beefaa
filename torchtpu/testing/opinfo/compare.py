"""Comparing a tpu result with CPU's: one set of tolerances, arbitrated by a CPU run in a wider
dtype; tied sort indices, sign-ambiguous eigenvectors and uninitialized outputs handled as the
package docstring says."""

from __future__ import annotations

import math
from typing import Any

import torch

from .common import (
    SIGN_AMBIGUOUS_COLUMNS, TIE_ORDER_INDICES, TOLERANCES, _Mismatch, _PERMUTATION_OPS,
    op_full_name,
)
from .samples import _run_sample, _slots, _upcast, _walk_tensors


# Where a mismatch is arbitrated by a CPU run in a wider dtype (see _arbitrates).
# CPU's result is a reference only up to its own rounding error, so a float mismatch is
# arbitrated by a CPU run in a wider dtype, the same way for every op (see _arbitrates).
# Examples this settles: matrix_exp (repeated squaring amplifies CPU's float32 rounding to 1e-3
# relative), scaled_dot_product_attention's backward (CPU's flash kernel accumulates blockwise:
# 1.2e-5 from float64 where tpu is 2.4e-6), layer norm's weight gradient over one element (an
# exact 0 that CPU's FMA returns as 1e-4 of noise), half-precision kernels that round partial
# sums to half (conv_transpose, addbmm, addr).
ARBITER_DTYPE = {torch.float32: torch.float64, torch.float16: torch.float32,
                 torch.bfloat16: torch.float32}


def _arbitrates(op, sample, dtype, with_grad: bool, out, grads, ref_out, ref_grads) -> bool:
    """Whether every float result of the tpu run is at least as close to a CPU run in a wider
    dtype as CPU's own result is (plus the dtype's tolerances). CPU's result is only a reference
    up to its own rounding error: a half-precision CPU kernel that rounds intermediate sums to
    half (conv_transpose, addbmm...) must not fail a device that accumulates in float32. Applies
    to every float dtype (ARBITER_DTYPE)."""
    wide = ARBITER_DTYPE.get(dtype)
    if wide is None:
        return False
    import types
    wide_sample = types.SimpleNamespace(input=_upcast(sample.input, dtype, wide),
                                        args=_upcast(sample.args, dtype, wide),
                                        kwargs=_upcast(sample.kwargs, dtype, wide),
                                        output_process_fn_grad=sample.output_process_fn_grad)
    try:
        exact_out, exact_grads = _run_sample(op, wide_sample, "cpu", with_grad)
    except Exception:  # noqa: BLE001
        return False
    if op_full_name(op) in SIGN_AMBIGUOUS_COLUMNS:
        exact_out = _fix_column_signs(exact_out, SIGN_AMBIGUOUS_COLUMNS[op_full_name(op)])
    triples = list(zip(_walk_tensors(out), _walk_tensors(ref_out), _walk_tensors(exact_out)))
    if not triples:
        return False
    if ref_grads is not None:
        if grads is None or exact_grads is None:
            return False
        triples += [t for t in zip(grads, ref_grads, exact_grads) if None not in t]
    rtol, atol = TOLERANCES[dtype]
    for a, c, x in triples:
        if not x.is_floating_point() or a.shape != x.shape or a.dtype != c.dtype:
            return False
        rounded = x.to(a.dtype).double()  # the wide result rounded as tpu's (may be inf)
        a, c, x = a.double(), c.double(), x.double()
        # Where CPU's own result is NaN but the wide run's is not (CPU overflowed), tpu must
        # match the wide run within the plain tolerances (or be its correctly rounded value).
        cpu_err = torch.where(c.isnan() & ~x.isnan(), torch.zeros_like(c), (c - x).abs())
        ok = (a - x).abs() <= cpu_err + atol + rtol * x.abs()
        ok |= a == rounded
        ok |= a.isnan() & x.isnan()
        if not bool(ok.all()):
            return False
    return True


def _tie_equivalent(op, sample, out, ref_out) -> bool:
    """See TIE_ORDER_INDICES."""
    name = op_full_name(op)
    pos = TIE_ORDER_INDICES.get(name)
    inp = sample.input
    if pos is None or not isinstance(inp, torch.Tensor) or inp.dim() == 0:
        return False
    if pos == -1:
        idx_t, idx_c = out, ref_out
    else:
        if not isinstance(out, (tuple, list)) or not isinstance(ref_out, (tuple, list)):
            return False
        try:
            compare(out[0], ref_out[0], "out[0]")
        except _Mismatch:
            return False
        idx_t, idx_c = out[pos], ref_out[pos]
    if not isinstance(idx_t, torch.Tensor) or not isinstance(idx_c, torch.Tensor):
        return False
    if idx_t.shape != idx_c.shape or idx_t.dtype != idx_c.dtype:
        return False
    inp = inp.detach().cpu()
    for d in range(inp.dim()):
        it, ic = idx_t, idx_c
        if it.dim() < inp.dim():
            it, ic = it.unsqueeze(d), ic.unsqueeze(d)
        try:
            gt, gc = inp.gather(d, it), inp.gather(d, ic)
        except (RuntimeError, IndexError):
            continue
        same = (gt == gc) | (gt.isnan() & gc.isnan()) if gt.is_floating_point() else gt == gc
        if not bool(same.all()):
            continue
        if name in _PERMUTATION_OPS and it.shape[d] == inp.shape[d]:
            expect = torch.arange(inp.shape[d]).view([-1 if i == d else 1 for i in range(it.dim())])
            if not bool((it.sort(dim=d).values == expect).all()):
                continue
        return True
    return False


def _fix_column_signs(out: Any, index: int) -> Any:
    if not isinstance(out, (tuple, list)) or len(out) <= index:
        return out
    v = out[index]
    if not isinstance(v, torch.Tensor) or v.dim() < 2 or v.numel() == 0:
        return out
    idx = v.abs().argmax(dim=-2, keepdim=True)
    sign = torch.sign(torch.gather(v, -2, idx))
    sign[sign == 0] = 1
    fixed = list(out)
    fixed[index] = v * sign
    return tuple(fixed)


def compare(actual: Any, expected: Any, path: str = "out",
            tol: tuple[float, float] | None = None) -> None:
    """Raises _Mismatch (with a one-line reason) unless `actual` (tpu results, already on the
    host) matches `expected` (CPU results) recursively. `tol`: (rtol, atol) for float tensors
    instead of TOLERANCES."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise _Mismatch(f"{path}: expected a tensor, got {type(actual).__name__}")
        if actual.dtype != expected.dtype:
            raise _Mismatch(f"{path}: dtype {actual.dtype} != {expected.dtype}")
        if actual.shape != expected.shape:
            raise _Mismatch(f"{path}: shape {tuple(actual.shape)} != {tuple(expected.shape)}")
        rtol, atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
        if tol is not None and expected.is_floating_point():
            rtol, atol = max(rtol, tol[0]), max(atol, tol[1])
        try:
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       check_device=False, check_stride=False)
        except AssertionError as e:
            lines = [l.strip() for l in str(e).splitlines() if l.strip()]
            detail = "; ".join(l for l in lines if l.startswith(("Mismatched", "Greatest")))
            raise _Mismatch(f"{path}: {detail or (lines[0] if lines else 'values differ')}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise _Mismatch(f"{path}: structure differs")
        for i, (a, b) in enumerate(zip(actual, expected)):
            compare(a, b, f"{path}[{i}]", tol)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            raise _Mismatch(f"{path}: dict keys differ")
        for k in expected:
            compare(actual[k], expected[k], f"{path}[{k!r}]", tol)
        return
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        if math.isnan(expected) and math.isnan(actual):
            return
        if not math.isclose(actual, expected, rel_tol=1e-4, abs_tol=1e-5):
            raise _Mismatch(f"{path}: {actual} != {expected}")
        return
    if actual != expected:
        raise _Mismatch(f"{path}: {actual!r} != {expected!r}")


def _identical(x: torch.Tensor, y: torch.Tensor) -> bool:
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.is_floating_point():
        return torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(0.5),
                                                                  y.nan_to_num(0.5))
    return torch.equal(x, y)


def _compare_metadata(actual: Any, expected: Any) -> None:
    """For ops returning uninitialized memory: structure, shapes, dtypes and strides only."""
    a, e = _slots(actual), _slots(expected)
    if len(a) != len(e):
        raise _Mismatch("out: structure differs")
    for i, (x, y) in enumerate(zip(a, e)):
        if (x is None) != (y is None):
            raise _Mismatch(f"out[{i}]: None on one side only")
        if x is None:
            continue
        for what, u, v in (("shape", tuple(x.shape), tuple(y.shape)), ("dtype", x.dtype, y.dtype),
                           ("stride", x.stride(), y.stride())):
            if u != v:
                raise _Mismatch(f"out[{i}]: {what} {u} != CPU's {v}")
