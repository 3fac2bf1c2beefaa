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

The package, by concern (each module imports only the ones above it): common (dtypes,
tolerances, per-op special cases, categories, op_db), samples (moving samples to a device and
running them), compare (tolerances, wider-dtype arbitration, ties, signs, metadata), random_ops
(comparison by distribution), runner (run_one, run_sweep), report (JSON and docs/OPINFO.md), cli
(`main`). Every name is importable from `torchtpu.testing.opinfo` as before.

Usage:
    python -m torchtpu.testing.opinfo --out docs/opinfo_report.json --summary docs/OPINFO.md
    python -m torchtpu.testing.opinfo --ops add,mul --dtypes float32 --summary -"""

from __future__ import annotations

from .common import (  # noqa: F401
    DTYPES,
    TOLERANCES,
    GRAD_TOLERANCE_OVERRIDES,
    SIGN_AMBIGUOUS_COLUMNS,
    TIE_ORDER_INDICES,
    _PERMUTATION_OPS,
    ACC_DTYPE_STATS,
    CATEGORIES,
    DEFAULT_MAX_SAMPLES,
    DEFAULT_TIMEOUT,
    _Timeout,
    _Skip,
    _Mismatch,
    op_full_name,
    load_op_db,
)
from .samples import (  # noqa: F401
    _walk_tensors,
    _check_sample,
    _move,
    _host_paths,
    _host_only_args,
    _upcast,
    _to_cpu,
    _float_outputs,
    _grad_leaves,
    _run_sample,
    _slots,
)
from .compare import (  # noqa: F401
    ARBITER_DTYPE,
    _arbitrates,
    _tie_equivalent,
    _fix_column_signs,
    compare,
    _identical,
    _compare_metadata,
)
from .random_ops import (  # noqa: F401
    _is_random,
    _seed_wrapped_fn,
    _seeded_draws,
    RANDOM_MIN_DRAWS,
    RANDOM_MAX_RUNS,
    RANDOM_PERMUTATIONS,
    RANDOM_SIGMAS,
    RANDOM_SECONDS,
    _ks_distance,
    _beyond_run_shuffles,
    _distributions_differ,
    _positions_differ,
    _proportions_differ,
    _draws,
    _distribution_check,
)
from .runner import (  # noqa: F401
    _UNINITIALIZED,
    _ONLY_DECORATORS,
    _only_device_types,
    _alarm,
    _first_line,
    _fallback_delta,
    run_one,
    run_sweep,
    _print_progress,
)
from .report import (  # noqa: F401
    _ABBREV,
    write_json,
    read_json,
    summarize,
    markdown_summary,
)
from .cli import (  # noqa: F401
    main,
)
