"""Steady-state timing shared by the benchmarks (run them as `python benchmarks/x.py`, which puts
this folder on sys.path)."""

import statistics
import sys
import time


def median_call_time(fn, sync, reps, batches, warmup=0, scale=1e6):
    """Median wall time of one call of `fn`, in seconds times `scale` (1e6: microseconds).

    `warmup` calls run first (compiles and first calls stay out of the figure); then `batches`
    batches of `reps` calls, each closed by `sync()`: tpu ops are asynchronous, so an unsynced
    batch would time the enqueueing only. The median of the batches resists a busy host.
    """
    for _ in range(warmup):
        fn()
    sync()
    # Steady state: a hot op's light program (TORCHTPU_LIGHT_COMPILE) upgraded to its
    # full-effort one now, not a second after the last compile, mid-measurement.
    torchtpu = sys.modules.get("torchtpu")
    if torchtpu is not None and warmup:
        torchtpu.finish_background_compiles()
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / reps * scale)
    return statistics.median(samples)
