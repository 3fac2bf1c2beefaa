"""Running one (OpInfo, dtype) into its record, and sweeping op_db."""

from __future__ import annotations

import contextlib
import signal
import time
import warnings
from itertools import islice
from typing import Callable, Iterable

import torch
import torchtpu

from .common import (
    ACC_DTYPE_STATS, DEFAULT_MAX_SAMPLES, DEFAULT_TIMEOUT, DTYPES, GRAD_TOLERANCE_OVERRIDES,
    SIGN_AMBIGUOUS_COLUMNS, _Mismatch, _Skip, _Timeout, load_op_db, op_full_name,
)
from .samples import _check_sample, _host_only_args, _move, _run_sample, _to_cpu
from .compare import _arbitrates, _compare_metadata, _fix_column_signs, _tie_equivalent, compare
from .random_ops import _distribution_check, _is_random


_UNINITIALIZED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                  "new_empty_strided"}


# PyTorch's device-type test decorators that restrict an OpInfo to one device type.
_ONLY_DECORATORS = {"onlyCUDA": "cuda", "onlyCPU": "cpu", "onlyMPS": "mps", "onlyXPU": "xpu"}


def _only_device_types(op) -> set[str]:
    """The device types an OpInfo's own decorators restrict it to (empty: no restriction)."""
    return {_ONLY_DECORATORS[n] for d in getattr(op, "decorators", ()) or ()
            if (n := getattr(d, "__name__", "")) in _ONLY_DECORATORS}


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
