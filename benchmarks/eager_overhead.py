"""Median per-op wall time of tiny eager ops on tpu and on PyTorch's CPU, in one process.

Prints one JSON object per line: {"op", "device", "median_us", ...}; the ratio lines compare
tpu to the CPU baseline measured in the same run. Each tpu op includes launch and, for the
final sample set, nothing waits: ops are asynchronous, so a sync closes each timed batch.
"""

import json

import torch

import torchtpu
from timing import median_call_time


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
            us = median_call_time(fn, sync[device], reps=200, batches=15, warmup=20)
            results[(op, device)] = us
            print(json.dumps({"op": op, "device": device, "median_us": round(us, 3)}))
    for op in cases("cpu"):
        ratio = results[(op, "tpu")] / results[(op, "cpu")]
        print(json.dumps({"op": op, "device": "tpu/cpu", "ratio": round(ratio, 2)}))
    m = torchtpu.metrics()
    print(json.dumps({"programs_compiled": m["programs_compiled"], "executions": m["executions"]}))


if __name__ == "__main__":
    main()
