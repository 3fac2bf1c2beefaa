"""Strided-view elementwise ops with size buckets on: the exact program against the size-generic
one (issue 28), which reaches a view's elements through runtime sizes and strides (gather and
scatter over computed indices). Why TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS defaults to never.

    python benchmarks/generic_views.py [--sizes 64 256 1024]

Runs itself once per setting (variables are read once per process), interleaved, and prints one
JSON line per (op, n, setting): the best-of-5 microseconds per call of a 300-call batch closed by
a sync, after a warmup. `views`: "exact" (TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS unset) or
"generic" (=1); `buckets_off`: TORCHTPU_SIZE_BUCKETS=0 for reference.
"""

import argparse
import json
import os
import subprocess
import sys
import time

SETTINGS = {"buckets_off": {"TORCHTPU_SIZE_BUCKETS": "0"},
            "exact": {"TORCHTPU_SIZE_BUCKETS": "1"},
            "generic": {"TORCHTPU_SIZE_BUCKETS": "1", "TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS": "1"}}


def child(sizes):
    import torch
    import torchtpu  # noqa: F401

    def best_us(fn, reps=300, tries=5):
        for _ in range(20):
            fn()
        torch.tpu.synchronize()
        best = float("inf")
        for _ in range(tries):
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            torch.tpu.synchronize()
            best = min(best, (time.perf_counter() - start) / reps)
        return best * 1e6

    for n in sizes:
        x = torch.randn(n, n, device="tpu")
        y = torch.randn(n, n // 2, device="tpu")
        ops = {"slice_add_": lambda: x[:, : n // 2].add_(1.0),
               "slice_copy_": lambda: x[:, n // 2:].copy_(y),
               "transpose_contiguous": lambda: x.t().contiguous()}
        for op, fn in ops.items():
            print(json.dumps({"op": op, "n": n, "view_elements": n * n // (2 if "slice" in op
                                                                           else 1),
                              "us": round(best_us(fn), 1)}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        child(a.sizes)
        return
    print(json.dumps({"host": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]}}))
    for r in range(a.rounds):
        for name, env in SETTINGS.items():
            out = subprocess.run([sys.executable, __file__, "--child", "--sizes",
                                  *map(str, a.sizes)], env=dict(os.environ, **env), check=True,
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                if line.startswith("{"):
                    row = json.loads(line)
                    row.update(setting=name, round=r)
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
