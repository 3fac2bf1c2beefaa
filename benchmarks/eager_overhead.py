"""Median per-op wall time of tiny eager ops on tpu and on PyTorch's CPU, in one process.

Prints one JSON object per line: {"op", "device", "median_us", ...}; the ratio lines compare
tpu to the CPU baseline measured in the same run. Each tpu op includes launch and, for the
final sample set, nothing waits: ops are asynchronous, so a sync closes each timed batch.

The CPU baseline runs on one thread (torch.set_num_threads(1), and OMP_NUM_THREADS /
OPENBLAS_NUM_THREADS / MKL_NUM_THREADS=1 set before torch loads): with its default pool of
threads, matmul's baseline swung 11-660 us on a loaded 2-core host as its threads fought other
processes, which made the ratio meaningless. The first line records the settings and the load.
"""

import json
import os

# Before torch (and its BLAS) load: the thread pools read these once.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402

import torchtpu  # noqa: E402
from timing import median_call_time  # noqa: E402


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


# What closes a timed batch on each device: tpu ops are asynchronous.
SYNC = {"cpu": lambda: None, "tpu": torch.tpu.synchronize}


def start_run():
    """One thread for the CPU baseline; prints the first line: the settings and the load."""
    torch.set_num_threads(1)
    print(json.dumps({"host": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
                               "torch_threads": torch.get_num_threads(),
                               "env": {k: os.environ[k] for k in
                                       ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                        "MKL_NUM_THREADS", "NPROC") if k in os.environ}}}))


def main():
    start_run()
    results = {}
    for device in ("cpu", "tpu"):
        for op, fn in cases(device).items():
            us = median_call_time(fn, SYNC[device], reps=200, batches=15, warmup=20)
            results[(op, device)] = us
            print(json.dumps({"op": op, "device": device, "median_us": round(us, 3)}))
    for op in cases("cpu"):
        ratio = results[(op, "tpu")] / results[(op, "cpu")]
        print(json.dumps({"op": op, "device": "tpu/cpu", "ratio": round(ratio, 2)}))
    m = torchtpu.metrics()
    print(json.dumps({"programs_compiled": m["programs_compiled"], "executions": m["executions"]}))


if __name__ == "__main__":
    main()
