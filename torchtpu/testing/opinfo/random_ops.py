"""Random ops draw from another generator on tpu than on CPU: their samples are compared by
distribution (see the comment above RANDOM_MIN_DRAWS)."""

from __future__ import annotations

import contextlib
import math
import time

import torch

from .common import TOLERANCES, _Mismatch
from .samples import _run_sample, _slots
from .compare import _identical


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
