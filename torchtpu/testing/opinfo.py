"""Conformance harness over PyTorch's OpInfo database (`op_db`).

For every OpInfo and each dtype of a fixed set that it supports on CPU, the first few sample
inputs run on `tpu` and on CPU and the results are compared with one set of tolerances for all
ops. For float32 OpInfos that support autograd, the gradients of the sum of the floating-point
outputs with respect to the floating-point inputs are compared too.

Each (op, dtype) lands in exactly one category:

    pass-native         every sample matched and no CPU fallback ran
    pass-with-fallback  every sample matched, but some aten ops ran through the CPU fallback
                        (named, from `torchtpu.metrics()['cpu_fallbacks_by_op']` deltas)
    mismatch            some output or gradient differed beyond the tolerances
    error               the tpu run raised (exception type and first line recorded), or timed out
    skipped             with a reason: the samples need float64/complex or a CPU-only object,
                        the CPU reference itself fails, ...

Random ops are compared by distribution and ops returning uninitialized memory by metadata
(see _distribution_check and _compare_metadata); a record's "check" says which.

Usage:
    python -m torchtpu.testing.opinfo --out docs/opinfo_report.json --summary docs/OPINFO.md
    python -m torchtpu.testing.opinfo --ops add,mul --dtypes float32 --summary -
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import time
import traceback
import warnings
from itertools import islice
from typing import Any, Callable, Iterable

import torch

import torchtpu

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    # float8: few OpInfos declare these dtypes on CPU (eye, _scaled_mm, _scaled_mm_v2); compared
    # exactly (no tolerance entry), as their results are rounded to float8 on both sides.
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz,
    "float8_e5m2fnuz": torch.float8_e5m2fnuz,
}

# One set of tolerances for every op, keyed by the dtype of the compared tensor. These are
# torch.testing.assert_close's defaults relaxed uniformly (the XLA CPU backend sums and
# approximates transcendentals in a different order than ATen's CPU kernels).
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-4, 1e-5),
    torch.complex64: (1e-4, 1e-5),
    torch.float16: (1.6e-2, 1e-2),
    torch.bfloat16: (1.6e-2, 1e-2),
}

# Gradient tolerances for samples where CPU's answer is rounding noise around an exact value,
# keyed by OpInfo name: (rtol, atol, why). Applied to gradients only.
GRAD_TOLERANCE_OVERRIDES: dict[str, tuple[float, float, str]] = {}

# Outputs defined only up to the sign of each column (eigenvectors): before comparing, each
# column of that output (by index) is scaled so its largest-magnitude entry is positive, on
# both sides. LAPACK's sign choice is not canonical, so no implementation can match it.
SIGN_AMBIGUOUS_COLUMNS: dict[str, int] = {"linalg.eigh": 1}

# Outputs holding indices into the input along one dim, where tied input values make several
# index choices correct: CPU's sort is not stable for every dtype and size, so tied elements come
# out in an arbitrary order. On a mismatch, the values (output 0) must still match exactly and
# the input gathered at tpu's indices must equal the input gathered at CPU's (permutation ops also
# need tpu's indices to be a permutation). Value: which output holds the indices (-1: the output).
TIE_ORDER_INDICES: dict[str, int] = {"sort": 1, "argsort": -1, "topk": 1, "kthvalue": 1,
                                     "mode": 1, "median": 1, "nanmedian": 1}
_PERMUTATION_OPS = {"sort", "argsort"}

# Saved statistics (mean, rstd / invstd) that PyTorch's meta kernels give in float32 for
# half-precision inputs on every device but the CPU (as CUDA returns them): compared after
# rounding tpu's float32 statistics to CPU's half dtype. Value: the output positions.
ACC_DTYPE_STATS: dict[str, tuple[int, ...]] = {
    "native_layer_norm": (1, 2), "native_batch_norm": (1, 2), "_native_batch_norm_legit": (1, 2),
    "_batch_norm_with_update": (1, 2)}

CATEGORIES = ("pass-native", "pass-with-fallback", "mismatch", "error", "skipped")

DEFAULT_MAX_SAMPLES = 4
DEFAULT_TIMEOUT = 60


class _Timeout(Exception):
    pass


class _Skip(Exception):
    pass


class _Mismatch(Exception):
    pass


def op_full_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def load_op_db():
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


# ----------------------------------------------------------------------------------------------
# Moving samples and comparing results


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


_UNINITIALIZED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                  "new_empty_strided"}


# PyTorch's device-type test decorators that restrict an OpInfo to one device type.
_ONLY_DECORATORS = {"onlyCUDA": "cuda", "onlyCPU": "cpu", "onlyMPS": "mps", "onlyXPU": "xpu"}


def _only_device_types(op) -> set[str]:
    """The device types an OpInfo's own decorators restrict it to (empty: no restriction)."""
    return {_ONLY_DECORATORS[n] for d in getattr(op, "decorators", ()) or ()
            if (n := getattr(d, "__name__", "")) in _ONLY_DECORATORS}


def _is_random(op) -> bool:
    """Whether the OpInfo wraps its op in wrapper_set_seed (what op_db does for random ops)."""
    fn = op.op
    for _ in range(3):
        if getattr(fn, "__name__", "") == "wrapper_set_seed":
            return True
        if "wrapper_set_seed" in getattr(getattr(fn, "__code__", None), "co_names", ()):
            return True
        fn = getattr(fn, "func", None)  # functools.partial
        if fn is None:
            break
    return False


def _seed_wrapped_fn(op):
    """The function of the OpInfo that calls wrapper_set_seed (None when there is none)."""
    fn = op.op
    for _ in range(3):
        if "wrapper_set_seed" in getattr(getattr(fn, "__code__", None), "co_names", ()):
            return fn
        fn = getattr(fn, "func", None)
        if fn is None:
            break
    return None


@contextlib.contextmanager
def _seeded_draws(op, seed_box: list):
    """Makes the OpInfo's wrapper_set_seed seed with seed_box[0] instead of its fixed 42, so
    repeated calls draw fresh values (op_db pins the seed so that two runs on one device agree)."""
    fn = _seed_wrapped_fn(op)
    if fn is None:
        yield
        return
    g = fn.__globals__
    old = g["wrapper_set_seed"]

    def wrapper_set_seed(f, *args, **kwargs):
        torch.manual_seed(seed_box[0])
        return f(*args, **kwargs)

    g["wrapper_set_seed"] = wrapper_set_seed
    try:
        yield
    finally:
        g["wrapper_set_seed"] = old


# Random ops (see _is_random) draw from another generator on tpu than on CPU, so their values
# cannot be compared one by one. Their samples that do not match exactly are compared by
# distribution instead: each side runs the sample with seeds 1, 2, ... until every output and
# gradient slot has pooled RANDOM_MIN_DRAWS values (at most RANDOM_MAX_RUNS runs; a side stops
# after RANDOM_SECONDS once it has 8 runs), then
#   - every run's outputs and gradients must have CPU's structure, shapes and dtypes;
#   - CPU's values must change with the seed (else the sample is deterministic and tpu's
#     differing values are a plain mismatch);
#   - the tpu run must be reproducible: the same seed twice gives bitwise the same results;
#   - per slot, the shares of NaN, +inf and -inf must agree (two-proportion z-test, |z| <= 6),
#     and the Kolmogorov-Smirnov distance D between tpu's and CPU's pooled finite values (with
#     the comparison tolerances, see _ks_distance) must be within the spread D has when runs are
#     shuffled between the two sides: at most the mean plus RANDOM_SIGMAS standard deviations of
#     RANDOM_PERMUTATIONS such shuffles. Shuffling whole runs, not values, keeps the test valid for
#     ops whose values within one run are dependent (dropout2d/3d drop whole channels); for the
#     Kolmogorov distribution the bound is a p-value of about 1e-5. Seeds are fixed, so the
#     verdict is reproducible;
#   - per position, the means across runs must agree within the same run-shuffle bound (see
#     _positions_differ): a draw that ignores per-element parameters keeps the pooled mixture.
RANDOM_MIN_DRAWS = 4000
RANDOM_MAX_RUNS = 300
RANDOM_PERMUTATIONS = 300
RANDOM_SIGMAS = 6.0
RANDOM_SECONDS = 4.0


def _slots(obj: Any) -> list:
    """Tensors and Nones of a (possibly nested) result, in order."""
    if obj is None or isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [s for x in obj for s in _slots(x)]
    if isinstance(obj, dict):
        return [s for k in sorted(obj) for s in _slots(obj[k])]
    return []


def _ks_distance(a, b, rtol: float, atol: float) -> float:
    """Two-sample Kolmogorov-Smirnov distance of sorted arrays a and b, with the comparison
    tolerances: the smallest e with F_a(x - t(x)) - e <= F_b(x) <= F_a(x + t(x)) + e for
    t(x) = atol + rtol |x|, so a value rounded differently on tpu (the kept elements of alpha
    dropout) counts as the same atom."""
    import numpy as np

    grid = np.concatenate([a, b])
    tol = atol + rtol * np.abs(grid)
    n, m = len(a), len(b)
    fa = np.searchsorted(a, grid, side="right") / n
    fb = np.searchsorted(b, grid, side="right") / m
    fa_hi = np.searchsorted(a, grid + tol, side="right") / n
    fb_hi = np.searchsorted(b, grid + tol, side="right") / m
    return float(max(0.0, np.max(fb - fa_hi), np.max(fa - fb_hi)))


def _beyond_run_shuffles(stat, n_tpu: int, n_runs: int):
    """(observed, null mean, null sd) when stat(mask) for the true labelling (the first n_tpu of
    n_runs runs are tpu's) exceeds the mean plus RANDOM_SIGMAS standard deviations of stat over
    RANDOM_PERMUTATIONS shuffles of whole runs between the sides; else None. stat returns None
    when undefined for a labelling, inf for a certain difference."""
    import numpy as np

    mask = np.zeros(n_runs, dtype=bool)
    mask[:n_tpu] = True
    observed = stat(mask)
    if not observed:
        return None
    rng = np.random.default_rng(0)
    null = [stat(rng.permutation(mask)) for _ in range(RANDOM_PERMUTATIONS)]
    null = [v for v in null if v is not None and math.isfinite(v)]
    mean = float(np.mean(null)) if null else 0.0
    sd = float(np.std(null)) if null else 0.0
    return (observed, mean, sd) if observed > mean + RANDOM_SIGMAS * sd else None


def _distributions_differ(tpu_runs: list, cpu_runs: list, rtol: float, atol: float):
    """(D, null mean, null sd) when the Kolmogorov-Smirnov distance between tpu's and CPU's
    pooled finite values is beyond the run-shuffle bound, else None."""
    import numpy as np

    runs = tpu_runs + cpu_runs

    def stat(mask):
        x = np.concatenate([r for r, m in zip(runs, mask) if m])
        y = np.concatenate([r for r, m in zip(runs, mask) if not m])
        x, y = np.sort(x[np.isfinite(x)]), np.sort(y[np.isfinite(y)])
        return _ks_distance(x, y, rtol, atol) if x.size and y.size else None

    return _beyond_run_shuffles(stat, len(tpu_runs), len(runs))


def _positions_differ(tpu_runs: list, cpu_runs: list, rtol: float, atol: float):
    """(S, null mean, null sd) when the per-position means of tpu's runs differ from CPU's
    beyond the run-shuffle bound, else None. Pooling all positions (_distributions_differ)
    cannot see a draw that ignores per-element parameters (bernoulli's p, normal's mean tensor)
    but keeps their overall mixture; this compares each position across runs:
    S = sum_j max(0, |mean_tpu_j - mean_cpu_j| - tol_j)^2 / (var_tpu_j + var_cpu_j) / runs, with
    tol_j = atol + rtol |mean_cpu_j| (rounding is not a difference). A position that is constant
    on both sides but apart beyond tol_j is a mismatch outright."""
    import numpy as np

    x = np.stack(tpu_runs + cpu_runs).astype(np.float64)  # (2R, J)
    finite = np.isfinite(x).all(axis=0)
    if not finite.any() or x.shape[1] == 0:
        return None
    x = x[:, finite]
    r = len(tpu_runs)

    def stat(mask):
        a, b = x[mask], x[~mask]
        ma, mb = a.mean(axis=0), b.mean(axis=0)
        d = np.maximum(0.0, np.abs(ma - mb) - (atol + rtol * np.abs(mb)))
        v = (a.var(axis=0) + b.var(axis=0)) / r
        if np.any((v == 0) & (d > 0)):
            return math.inf
        return float(np.sum(np.where(v > 0, d * d / np.where(v > 0, v, 1.0), 0.0)))

    return _beyond_run_shuffles(stat, r, x.shape[0])


def _proportions_differ(k1: int, n1: int, k2: int, n2: int) -> bool:
    if k1 == 0 and k2 == 0:
        return False
    p = (k1 + k2) / (n1 + n2)
    se = math.sqrt(max(p * (1 - p) * (1 / n1 + 1 / n2), 1e-300))
    return abs(k1 / n1 - k2 / n2) / se > 6.0


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


def _draws(op, sample, device, with_grad, keep_cpu, runs, seed_box) -> tuple[list, list, bool]:
    """(per-run slot metadata, per slot the float64 values of each run, whether the values of
    two runs ever differ) for seeds 1..runs."""
    import numpy as np

    per_run, values, varies = [], None, False
    start = time.perf_counter()
    for s in range(1, runs + 1):
        # Slow samples (svd_lowrank) stop at RANDOM_SECONDS a side, after at least 8 runs.
        if s > 8 and time.perf_counter() - start > RANDOM_SECONDS:
            break
        seed_box[0] = s
        out, grads = _run_sample(op, sample, device, with_grad, keep_cpu, seed=s)
        slots = _slots(out) + _slots(grads)
        per_run.append([None if t is None else (tuple(t.shape), t.dtype) for t in slots])
        vals = [None if t is None else t.detach().reshape(-1).double().numpy() for t in slots]
        if values is None:
            values = [[] for _ in vals]
        for i, v in enumerate(vals):
            if v is not None and i < len(values):
                if values[i] and not np.array_equal(values[i][0], v, equal_nan=True):
                    varies = True
                values[i].append(v)
    return per_run, values or [], varies


def _distribution_check(op, sample, with_grad, keep_cpu, ref_out, ref_grads) -> str:
    """Compares a random op's sample by distribution (see RANDOM_MIN_DRAWS); returns a short
    description of what was compared, raises _Mismatch when tpu's draws differ from CPU's."""
    import numpy as np

    numels = [t.numel() for t in _slots(ref_out) + _slots(ref_grads) if t is not None]
    smallest = max(1, min([n for n in numels if n > 0], default=1))
    runs = max(8, min(RANDOM_MAX_RUNS, -(-RANDOM_MIN_DRAWS // smallest)))
    seed_box = [1]
    with _seeded_draws(op, seed_box):
        cpu_meta, cpu_vals, cpu_varies = _draws(op, sample, "cpu", with_grad, frozenset(), runs,
                                                seed_box)
        runs = len(cpu_meta)
        tpu_meta, tpu_vals, _ = _draws(op, sample, "tpu", with_grad, keep_cpu, runs, seed_box)
        if len(tpu_meta) < runs:  # tpu hit the time limit first: compare equal numbers of runs
            runs = len(tpu_meta)
            cpu_meta, cpu_vals = cpu_meta[:runs], [v[:runs] for v in cpu_vals]
        seed_box[0] = 1
        again, again_grads = _run_sample(op, sample, "tpu", with_grad, keep_cpu, seed=1)
        seed_box[0] = 1
        first, first_grads = _run_sample(op, sample, "tpu", with_grad, keep_cpu, seed=1)
    for i, (t, c) in enumerate(zip(tpu_meta, cpu_meta)):
        if t != c:
            raise _Mismatch(f"random op, run {i + 1}: results (shape, dtype) {t} != CPU's {c}")
    if not cpu_varies:
        raise _Mismatch("random op: the sample is deterministic on CPU but tpu's values differ")
    for i, (x, y) in enumerate(zip(_slots(again) + _slots(again_grads),
                                   _slots(first) + _slots(first_grads))):
        if (x is None) != (y is None) or (x is not None and not _identical(x, y)):
            raise _Mismatch(f"random op, slot {i}: not reproducible under a seed on tpu")
    slot_dtypes = [m[1] if m is not None else None for m in cpu_meta[0]]
    for i, (tv_runs, cv_runs) in enumerate(zip(tpu_vals, cpu_vals)):
        if not cv_runs or not tv_runs:
            continue
        tv, cv = np.concatenate(tv_runs), np.concatenate(cv_runs)
        if cv.size == 0:
            continue
        for kind in (np.isnan, np.isposinf, np.isneginf):
            if _proportions_differ(int(kind(tv).sum()), tv.size, int(kind(cv).sum()), cv.size):
                raise _Mismatch(f"random op, slot {i}: share of {kind.__name__} values "
                                f"{kind(tv).mean():.4f} != CPU's {kind(cv).mean():.4f}")
        rtol, atol = TOLERANCES.get(slot_dtypes[i], (0.0, 0.0))
        differ = _distributions_differ(tv_runs, cv_runs, rtol, atol)
        if differ:
            d, mean, sd = differ
            raise _Mismatch(f"random op, slot {i}: tpu draws differ from CPU's in distribution "
                            f"(Kolmogorov-Smirnov D={d:.3f}; runs shuffled between the sides: "
                            f"{mean:.3f} +- {sd:.3f}; {tv.size} vs {cv.size} values)")
        differ = _positions_differ(tv_runs, cv_runs, rtol, atol)
        if differ:
            st, mean, sd = differ
            raise _Mismatch(f"random op, slot {i}: per-position means of tpu's draws differ from "
                            f"CPU's (S={st:.3g}; runs shuffled between the sides: {mean:.3g} +- "
                            f"{sd:.3g}; {len(tv_runs)} runs)")
    return f"{runs} seeded runs per side"


# ----------------------------------------------------------------------------------------------
# One (op, dtype)


@contextlib.contextmanager
def _alarm(seconds: float):
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum, frame):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return (msg[0] if msg else "")[:300]


def _fallback_delta(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


def run_one(op, dtype_name: str, max_samples: int = DEFAULT_MAX_SAMPLES,
            timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Runs one (OpInfo, dtype) and returns its record: op, dtype, category, detail, fallbacks,
    samples (how many ran), grad (whether gradients were compared), seconds."""
    dtype = DTYPES[dtype_name]
    rec = {"op": op_full_name(op), "dtype": dtype_name, "category": None, "detail": "",
           "fallbacks": {}, "samples": 0, "grad": False, "seconds": 0.0}
    t0 = time.perf_counter()
    with_grad = dtype == torch.float32 and bool(op.supports_autograd)
    fallbacks: dict[str, int] = {}
    stage = "sample generation"
    try:
        with _alarm(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                samples = list(islice(op.sample_inputs("cpu", dtype, requires_grad=with_grad),
                                      max_samples))
            except Exception as e:
                raise _Skip(f"sample generation failed: {type(e).__name__}: {_first_line(e)}")
            if not samples:
                raise _Skip("no sample inputs")
            for sample in samples:
                _check_sample(sample)
            host_paths = _host_only_args(op, dtype, with_grad, len(samples))
            ran = 0
            grad_checked = False
            checks: set[str] = set()
            for i, sample in enumerate(samples):
                keep_cpu = host_paths[i] if i < len(host_paths) else frozenset()
                stage = "CPU reference"
                try:
                    ref_out, ref_grads = _run_sample(op, sample, "cpu", with_grad)
                except (_Timeout, KeyboardInterrupt):
                    raise
                except Exception as e:
                    raise _Skip(f"CPU reference fails: {type(e).__name__}: {_first_line(e)}")
                stage = "tpu run"
                before = dict(torchtpu.metrics()["cpu_fallbacks_by_op"])
                try:
                    out, grads = _run_sample(op, sample, "tpu", with_grad, keep_cpu)
                finally:
                    delta = _fallback_delta(before, torchtpu.metrics()["cpu_fallbacks_by_op"])
                    for k, v in delta.items():
                        fallbacks[k] = fallbacks.get(k, 0) + v
                stage = "compare"
                if op.name in _UNINITIALIZED:
                    # The values are unspecified: the op's contract is the tensor's metadata
                    # (compared on the devices: copying to the host makes gapped strides dense).
                    _compare_metadata(
                        _run_sample(op, sample, "tpu", False, keep_cpu, on_host=False)[0],
                        _run_sample(op, sample, "cpu", False, on_host=False)[0])
                    checks.add("metadata")
                    ran += 1
                    continue
                if op_full_name(op) in ACC_DTYPE_STATS and isinstance(out, (tuple, list)):
                    out = list(out)
                    for i in ACC_DTYPE_STATS[op_full_name(op)]:
                        o, r = out[i], ref_out[i]
                        if (isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
                                and o.dtype == torch.float32
                                and r.dtype in (torch.float16, torch.bfloat16)):
                            out[i] = o.to(r.dtype)
                    out = tuple(out)
                if op_full_name(op) in SIGN_AMBIGUOUS_COLUMNS:
                    i_amb = SIGN_AMBIGUOUS_COLUMNS[op_full_name(op)]
                    out = _fix_column_signs(out, i_amb)
                    ref_out = _fix_column_signs(ref_out, i_amb)
                try:
                    compare(out, ref_out, "out")
                    if ref_grads is not None:
                        if grads is None:
                            raise _Mismatch("grad: tpu outputs do not require grad")
                        gtol = GRAD_TOLERANCE_OVERRIDES.get(op_full_name(op))
                        compare(grads, ref_grads, "grad", gtol[:2] if gtol else None)
                except _Mismatch:
                    if ref_grads is None and _tie_equivalent(op, sample, out, ref_out):
                        ran += 1
                        continue
                    if _arbitrates(op, sample, dtype, with_grad, out, grads, ref_out,
                                   ref_grads):
                        grad_checked = grad_checked or ref_grads is not None
                        ran += 1
                        continue
                    # A random op draws from a different generator on tpu than on CPU.
                    if _is_random(op):
                        stage = "distribution comparison"
                        _distribution_check(op, sample, with_grad, keep_cpu, ref_out, ref_grads)
                        checks.add("distribution")
                        grad_checked = grad_checked or ref_grads is not None
                        ran += 1
                        continue
                    again, _ = _run_sample(op, sample, "cpu", False)
                    torch.manual_seed(1)
                    memo: dict = {}
                    with torch.no_grad():
                        other = _to_cpu(op(_move(sample.input, "cpu", memo),
                                           *_move(sample.args, "cpu", memo),
                                           **_move(sample.kwargs, "cpu", memo)))
                    try:
                        compare(other, again, "out")
                    except _Mismatch:
                        raise _Skip("random op: CPU results differ between seeds")
                    raise
                grad_checked = grad_checked or ref_grads is not None
                ran += 1
            rec["samples"] = ran
            rec["grad"] = grad_checked
            rec["category"] = "pass-with-fallback" if fallbacks else "pass-native"
            notes = []
            if "distribution" in checks:
                notes.append("random: samples compared by distribution")
            if "metadata" in checks:
                notes.append("uninitialized memory: metadata compared")
            if fallbacks:
                notes.append("fallback: " + ", ".join(sorted(fallbacks)))
            rec["detail"] = "; ".join(notes)
            rec["check"] = ("metadata" if "metadata" in checks else
                            "distribution" if "distribution" in checks else "values")
    except _Skip as e:
        rec["category"], rec["detail"] = "skipped", str(e)
    except _Mismatch as e:
        rec["category"], rec["detail"] = "mismatch", str(e)[:400]
    except _Timeout:
        rec["category"], rec["detail"] = "error", f"timeout ({timeout:g} s, during {stage})"
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - nothing may stop the sweep
        rec["category"] = "error"
        rec["detail"] = f"{type(e).__name__}: {_first_line(e)}"
    rec["fallbacks"] = fallbacks
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def run_sweep(ops: Iterable[str] | None = None, dtypes: Iterable[str] = tuple(DTYPES),
              max_samples: int = DEFAULT_MAX_SAMPLES, timeout: float = DEFAULT_TIMEOUT,
              progress: Callable[[dict], None] | bool | None = None,
              done: set[tuple[str, str]] | None = None) -> list[dict]:
    """Runs the harness and returns one record per (OpInfo, dtype) (see run_one).

    ops: full OpInfo names (`name` or `name.variant_test_name`); None runs all of op_db. A bare
    name also selects its variants only when no OpInfo has exactly that full name.
    dtypes: names from DTYPES. An OpInfo supporting none of them on CPU gets one skipped record
    with dtype "-". progress: a callable given each record, or True to print a line per record.
    done: (op, dtype) pairs to leave out (resuming an earlier sweep)."""
    op_db = load_op_db()
    if ops is not None:
        wanted = list(ops)
        full = {op_full_name(o) for o in op_db}
        selected = []
        for o in op_db:
            fn = op_full_name(o)
            if fn in wanted or (o.name in wanted and o.name not in full):
                selected.append(o)
        missing = [w for w in wanted if w not in full and w not in {o.name for o in op_db}]
        if missing:
            raise ValueError(f"unknown OpInfo names: {missing}")
    else:
        selected = list(op_db)
    dtypes = list(dtypes)
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"unknown dtype {d!r}; choose from {list(DTYPES)}")
    if progress is True:
        progress = _print_progress
    done = done or set()
    records = []
    for op in selected:
        name = op_full_name(op)
        try:
            supported = op.supported_dtypes("cpu")
        except Exception as e:  # noqa: BLE001
            supported = set()
        todo = [d for d in dtypes if DTYPES[d] in supported]
        only_on = _only_device_types(op)
        if only_on and "cpu" not in only_on:
            # PyTorch's own tests never run these on the CPU (the jiterator ops assert CUDA), so
            # they do not support float32 on CPU whatever their dtype lists say.
            todo, supported = [], set()
            why = f"the OpInfo runs only on {', '.join(sorted(only_on))} (decorator only*)"
        else:
            why = ""
        if not todo:
            if (name, "-") in done:
                continue
            others = sorted(str(d).replace("torch.", "") for d in supported)
            rec = {"op": name, "dtype": "-", "category": "skipped",
                   "detail": why or ("supports none of the swept dtypes on CPU"
                                     + (f" (only {', '.join(others)})" if others else "")),
                   "fallbacks": {}, "samples": 0, "grad": False, "seconds": 0.0}
            records.append(rec)
            if progress:
                progress(rec)
            continue
        for d in todo:
            if (name, d) in done:
                continue
            rec = run_one(op, d, max_samples=max_samples, timeout=timeout)
            records.append(rec)
            if progress:
                progress(rec)
    return records


def _print_progress(rec: dict) -> None:
    print(f"{rec['op']:<45} {rec['dtype']:<9} {rec['category']:<19} {rec['seconds']:7.2f}s "
          f"{rec['detail'][:120]}", flush=True)


# ----------------------------------------------------------------------------------------------
# Reports

_ABBREV = {"pass-native": "native", "pass-with-fallback": "fallback", "mismatch": "MISMATCH",
           "error": "ERROR", "skipped": "skip"}


def write_json(records: list[dict], path: str, meta: dict | None = None) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta or {}, "records": records}, f, indent=1)
    os.replace(tmp, path)


def read_json(path: str) -> tuple[list[dict], dict]:
    with open(path) as f:
        data = json.load(f)
    return data["records"], data.get("meta", {})


def summarize(records: list[dict]) -> dict:
    """Totals per dtype and category, plus the float32 pass rates."""
    totals: dict[str, dict[str, int]] = {}
    for r in records:
        totals.setdefault(r["dtype"], {c: 0 for c in CATEGORIES})[r["category"]] += 1
    f32 = totals.get("float32", {c: 0 for c in CATEGORIES})
    n = sum(f32.values())
    native = f32["pass-native"]
    either = native + f32["pass-with-fallback"]
    checks = {"distribution": 0, "metadata": 0}
    for r in records:
        if r["dtype"] == "float32" and r.get("check") in checks:
            checks[r["check"]] += 1
    return {"totals": totals, "float32_ops": n, "float32_checks": checks,
            "float32_native_pct": 100.0 * native / n if n else 0.0,
            "float32_native_or_fallback_pct": 100.0 * either / n if n else 0.0}


def markdown_summary(records: list[dict], meta: dict | None = None) -> str:
    meta = meta or {}
    s = summarize(records)
    dtypes_seen = [d for d in DTYPES if d in s["totals"]]
    lines = ["# OpInfo conformance report", ""]
    lines.append("Generated by `scripts/opinfo_sweep.sh` (`python -m torchtpu.testing.opinfo`): "
                 "every OpInfo of PyTorch's `op_db` and each swept dtype it supports on CPU runs "
                 f"its first {meta.get('max_samples', DEFAULT_MAX_SAMPLES)} sample inputs on "
                 "`tpu` and on CPU, and the results are compared (float32 rtol 1e-4 / atol 1e-5, "
                 "float16/bfloat16 rtol 1.6e-2 / atol 1e-2, integers, bool and float8 exactly; NaN/inf "
                 "positions must match). For float32 OpInfos supporting autograd, the gradients "
                 "of the sum of the float outputs w.r.t. the float inputs are compared too.")
    lines.append("")
    for name, (rtol, atol, why) in GRAD_TOLERANCE_OVERRIDES.items():
        lines.append(f"- `{name}` gradients: rtol {rtol:g} / atol {atol:g} ({why}).")
    for name, i in SIGN_AMBIGUOUS_COLUMNS.items():
        lines.append(f"- `{name}`: output {i} (eigenvectors) is compared with each column's "
                     "sign normalized (largest-magnitude entry positive), on both sides.")
    lines.append("- " + ", ".join(f"`{n}`" for n in TIE_ORDER_INDICES) + ": where tied input "
                 "values make several index choices correct (CPU's sort is not stable for every "
                 "dtype and size), a mismatch of the indices passes when the values match exactly "
                 "and the input gathered at tpu's indices equals the input gathered at CPU's "
                 "(sort/argsort indices must also be a permutation).")
    lines.append("- " + ", ".join(f"`{n}`" for n in ACC_DTYPE_STATS) + ": for half inputs the "
                 "saved statistics are float32 on tpu (PyTorch's meta kernels say so for every "
                 "device but the CPU, as on CUDA) and are compared rounded to CPU's half dtype.")
    lines.append("- Every float dtype, every op: a mismatch passes when every tpu result is no "
                 "further from a CPU run in a wider dtype (same inputs upcast: float64 for "
                 "float32, float32 for float16/bfloat16) than CPU's own result is, elementwise, "
                 "plus the tolerances above. CPU's result is a reference only up to its own "
                 "rounding error: matrix_exp's repeated squaring, CPU's blockwise flash-attention "
                 "backward, an FMA's noise around an exact 0 in layer norm's weight gradient, "
                 "half kernels that round partial sums to half. Output dtypes must still agree.")
    lines.append("- Random ops (op_db wraps them in `wrapper_set_seed`) draw from another "
                 "generator on tpu than on CPU: a sample that does not match exactly is compared "
                 "by distribution. Both sides run it with seeds 1, 2, ... until each output and "
                 f"gradient has {RANDOM_MIN_DRAWS} values (at most {RANDOM_MAX_RUNS} runs, and "
                 f"no more than {RANDOM_SECONDS:g} s a side after 8 runs); "
                 "shapes and dtypes must match every run, CPU's values must depend on the seed, "
                 "tpu must be bitwise reproducible under a seed, the shares of NaN/inf must agree, "
                 "and the Kolmogorov-Smirnov distance between the pooled values (with the "
                 "tolerances above) must stay within the mean plus "
                 f"{RANDOM_SIGMAS:g} standard deviations of {RANDOM_PERMUTATIONS} shuffles of "
                 "whole runs between the sides (a p-value of about 1e-5; at 4,000 draws a side "
                 "it rejects a difference of the distribution functions of about 0.055); per "
                 "output position, the means across runs must agree within the same kind of "
                 "bound (a draw that ignored per-element parameters would keep the pooled "
                 "mixture). The "
                 "detail column says `random: samples compared by distribution`.")
    lines.append("- `empty`, `empty_like`, `empty_strided`, `empty_permuted`, `new_empty`, "
                 "`new_empty_strided` return uninitialized memory: their shapes, dtypes and "
                 "strides (on the device) are compared, not their values.")
    lines.append("- OpInfos whose decorators restrict them to another device type (the "
                 "`jiterator_*` ops are `onlyCUDA`) are not counted as supporting float32 on "
                 "CPU.")
    lines.append("- Arguments a sample creates on the CPU whatever the device (found by generating "
                 "the samples for `meta` too, e.g. tensor_split's indices) stay on the CPU.")
    lines.append("")
    if meta.get("note"):
        lines += [f"**Note:** {meta['note']}", ""]
    for key, label in (("torch", "torch"), ("date", "date"), ("seconds", "sweep runtime (s)"),
                       ("dtypes", "dtypes swept")):
        if key in meta:
            v = meta[key]
            lines.append(f"- {label}: {', '.join(v) if isinstance(v, list) else v}")
    lines.append(f"- OpInfos: {len({r['op'] for r in records})}")
    lines.append("")
    lines.append(f"**float32:** {s['float32_native_pct']:.1f}% of the {s['float32_ops']} "
                 f"OpInfos supporting float32 pass natively; "
                 f"{s['float32_native_or_fallback_pct']:.1f}% pass natively or with the CPU "
                 "fallback.")
    ch = s["float32_checks"]
    if ch["distribution"] or ch["metadata"]:
        lines.append("")
        values_only = s["totals"]["float32"]["pass-native"] - ch["distribution"] - ch["metadata"]
        lines.append(f"Of the float32 passes, {ch['distribution']} are random ops compared by "
                     f"distribution and {ch['metadata']} ops returning uninitialized memory "
                     "compared by metadata (see above); the rest compare values. Counting only "
                     f"value comparisons as native passes: {values_only} of {s['float32_ops']} "
                     f"({100.0 * values_only / max(1, s['float32_ops']):.1f}%).")
    lines.append("")
    lines.append("## Totals")
    lines.append("")
    cols = dtypes_seen + (["-"] if "-" in s["totals"] else [])
    lines.append("| category | " + " | ".join("no swept dtype" if c == "-" else c for c in cols)
                 + " |")
    lines.append("|---" * (len(cols) + 1) + "|")
    for c in CATEGORIES:
        lines.append(f"| {c} | " + " | ".join(str(s["totals"][d][c]) for d in cols) + " |")
    lines.append("| **total** | " + " | ".join(str(sum(s["totals"][d].values())) for d in cols)
                 + " |")
    lines.append("")

    # Fallbacks.
    fb_ops: dict[str, int] = {}
    fb_users: dict[str, set] = {}
    for r in records:
        for k, v in r.get("fallbacks", {}).items():
            fb_ops[k] = fb_ops.get(k, 0) + v
            fb_users.setdefault(k, set()).add(r["op"])
    lines.append("## CPU fallbacks")
    lines.append("")
    lines.append("Aten ops that ran through the CPU fallback, with the number of calls over the "
                 "whole sweep and how many OpInfos hit them.")
    lines.append("")
    if fb_ops:
        lines.append("| aten op | calls | OpInfos |")
        lines.append("|---|---|---|")
        for k, v in sorted(fb_ops.items(), key=lambda kv: (-len(fb_users[kv[0]]), -kv[1])):
            lines.append(f"| `{k}` | {v} | {len(fb_users[k])} |")
    else:
        lines.append("(none)")
    lines.append("")

    # Per-op table.
    by_op: dict[str, dict[str, dict]] = {}
    for r in records:
        by_op.setdefault(r["op"], {})[r["dtype"]] = r
    lines.append("## Per-op results")
    lines.append("")
    lines.append("native = pass-native, fallback = pass-with-fallback, skip = skipped, "
                 "`-` = dtype not supported by the OpInfo on CPU (or not swept). The detail "
                 "column explains the first non-passing dtype (or the fallback ops).")
    lines.append("")
    lines.append("| op | " + " | ".join(dtypes_seen) + " | detail |")
    lines.append("|---" * (len(dtypes_seen) + 2) + "|")
    for name in sorted(by_op):
        cells = by_op[name]
        row = [_ABBREV[cells[d]["category"]] if d in cells else "-" for d in dtypes_seen]
        detail = ""
        if "-" in cells:
            detail = cells["-"]["detail"]
        else:
            for d in dtypes_seen:
                if d in cells and cells[d]["category"] not in ("pass-native",):
                    detail = f"{d}: {cells[d]['detail']}"
                    if cells[d]["category"] != "pass-with-fallback":
                        break
        detail = detail.replace("|", "\\|").replace("\n", " ")[:200]
        lines.append(f"| {name} | " + " | ".join(row) + f" | {detail} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", help="comma-separated OpInfo names (default: all of op_db)")
    p.add_argument("--dtypes", default=",".join(DTYPES),
                   help=f"comma-separated, from {','.join(DTYPES)}")
    p.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds per (op, dtype) before it is recorded as 'error: timeout'")
    p.add_argument("--out", help="JSON report path (written as the sweep goes)")
    p.add_argument("--summary", help="markdown summary path ('-' prints it)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --out and run only the missing ones")
    p.add_argument("--merge", nargs="*", default=[],
                   help="JSON reports to merge in (later records replace earlier ones)")
    p.add_argument("--note", default="", help="a note for the summary header")
    p.add_argument("--no-run", action="store_true", help="only merge and write the summary")
    p.add_argument("-q", "--quiet", action="store_true")
    a = p.parse_args(argv)

    records: list[dict] = []
    meta: dict = {}
    if a.resume and a.out and os.path.exists(a.out):
        records, meta = read_json(a.out)
    for path in a.merge:
        more, m = read_json(path)
        records += more
        meta.setdefault("seconds", 0)
        meta["seconds"] = round(meta.get("seconds", 0) + m.get("seconds", 0), 1)
        meta["dtypes"] = sorted(set(meta.get("dtypes", [])) | set(m.get("dtypes", [])),
                                key=list(DTYPES).index)
        meta.setdefault("max_samples", m.get("max_samples"))
    dtypes = [d for d in a.dtypes.split(",") if d]
    meta.update({"torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                     time.gmtime()),
                 "max_samples": a.max_samples})
    if a.note:
        meta["note"] = a.note
    if not a.no_run:
        meta["dtypes"] = sorted(set(meta.get("dtypes", [])) | set(dtypes),
                                key=list(DTYPES).index)
        done = {(r["op"], r["dtype"]) for r in records}
        start = time.perf_counter()
        base_seconds = meta.get("seconds", 0)
        last_write = [time.perf_counter()]

        def progress(rec):
            records.append(rec)
            if not a.quiet:
                _print_progress(rec)
            if a.out and time.perf_counter() - last_write[0] > 30:
                meta["seconds"] = round(base_seconds + time.perf_counter() - start, 1)
                write_json(records, a.out, meta)
                last_write[0] = time.perf_counter()

        run_sweep(ops=a.ops.split(",") if a.ops else None, dtypes=dtypes,
                  max_samples=a.max_samples, timeout=a.timeout, progress=progress, done=done)
        meta["seconds"] = round(base_seconds + time.perf_counter() - start, 1)
    # Later records replace earlier ones for the same (op, dtype).
    dedup: dict[tuple[str, str], dict] = {}
    for r in records:
        dedup[(r["op"], r["dtype"])] = r
    # A "no swept dtype" record only stands for an op with no other record (merged sweeps over
    # different dtype sets).
    real = {op for (op, d) in dedup if d != "-"}
    records = [r for (op, d), r in dedup.items() if d != "-" or op not in real]
    if a.out:
        write_json(records, a.out, meta)
    if a.summary:
        text = markdown_summary(records, meta)
        if a.summary == "-":
            print(text)
        else:
            with open(a.summary, "w") as f:
                f.write(text)
    s = summarize(records)
    print(f"float32: {s['float32_native_pct']:.1f}% native, "
          f"{s['float32_native_or_fallback_pct']:.1f}% native-or-fallback of "
          f"{s['float32_ops']} OpInfos; totals {json.dumps(s['totals'])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
