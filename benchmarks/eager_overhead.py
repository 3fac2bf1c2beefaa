"""Median per-op wall time of tiny eager ops on tpu and on PyTorch's CPU, in one process.

Prints one JSON object per line: {"op", "device", "median_us", ...}; the ratio lines compare
tpu to the CPU baseline measured in the same run. Each tpu op includes launch and, for the
final sample set, nothing waits: ops are asynchronous, so a sync closes each timed batch.
"""

import json
import statistics
import time

import torch

import torchtpu


def bench(fn, sync, reps=200, batches=15):
    for _ in range(20):
        fn()
    sync()
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / reps * 1e6)
    return statistics.median(samples)


def cases(device):
    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)
    m = torch.randn(64, 64, device=device)
    v = torch.randn(64, 64, device=device)
    return {
        "add_1elem": lambda: a + b,
        "mul_python_scalar": lambda: a * 3.5,
        "matmul_64x64": lambda: m @ m,
        "sum_64x64": lambda: v.sum(),
        "slice_view_add_": lambda: v[:, 1:9].add_(1.0),
    }


def main():
    sync = {"cpu": lambda: None, "tpu": torch.tpu.synchronize}
    results = {}
    for device in ("cpu", "tpu"):
        for op, fn in cases(device).items():
            us = bench(fn, sync[device])
            results[(op, device)] = us
            print(json.dumps({"op": op, "device": device, "median_us": round(us, 3)}))
    for op in cases("cpu"):
        ratio = results[(op, "tpu")] / results[(op, "cpu")]
        print(json.dumps({"op": op, "device": "tpu/cpu", "ratio": round(ratio, 2)}))
    m = torchtpu.metrics()
    print(json.dumps({"programs_compiled": m["programs_compiled"], "executions": m["executions"]}))


if __name__ == "__main__":
    main()
