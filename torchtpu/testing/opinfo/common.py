"""What the harness compares with: the swept dtypes, the tolerances, the per-op special cases
(sign-ambiguous columns, tie-ordered indices, float32 statistics), the record categories, and
PyTorch's op_db."""

from __future__ import annotations

import torch


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
