"""What torch.profiler's tpu hooks cost: median per-op wall time of tiny eager tpu ops with no
profiler running, under a CPU-only profile, and under a CPU+tpu profile, beside PyTorch CPU eager
as the baseline of the same run.

`--before PATH` also measures the no-profiler case with the torchtpu of another checkout at PATH
(built without the hooks, e.g. the commit before them), alternating rounds with this one in
subprocesses, so "profiling off costs nothing measurable" is a ratio from one run.

Prints one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import torch
from timing import median_call_time


def cases(device):
    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)
    m = torch.randn(64, 64, device=device)
    return {
        "add_1elem": lambda: a + b,
        "mul_python_scalar": lambda: a * 3.5,
        "matmul_64x64": lambda: m @ m,
    }


def measure_off(device: str) -> dict:
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    return {op: median_call_time(fn, sync, reps=200, batches=9, warmup=20)
            for op, fn in cases(device).items()}


def child(rounds: int) -> None:
    """Prints the no-profiler tpu medians of `rounds` rounds (one JSON list per line)."""
    import torchtpu  # noqa: F401

    for _ in range(rounds):
        print(json.dumps(measure_off("tpu")), flush=True)


def run_child(path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=path)
    out = subprocess.run([sys.executable, __file__, "--child", "1"], env=env, check=True,
                         capture_output=True, text=True, cwd=path).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="checkout whose torchtpu has no profiler hooks")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from torch.profiler import ProfilerActivity, profile

    import torchtpu  # noqa: F401

    results: dict = {}

    def add(setting, values):
        for op, us in values.items():
            results.setdefault((op, setting), []).append(us)

    for _ in range(args.rounds):
        add("cpu_eager", measure_off("cpu"))
        if args.before:
            add("tpu_off_before", run_child(os.path.abspath(args.before)))
            add("tpu_off_this", run_child(here))
        add("tpu_off", measure_off("tpu"))
        with profile(activities=[ProfilerActivity.CPU]):
            add("tpu_profiled_cpu_only", measure_off("tpu"))
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            add("tpu_profiled_cpu_tpu", measure_off("tpu"))

    med = {k: statistics.median(v) for k, v in results.items()}
    for (op, setting), us in sorted(med.items()):
        print(json.dumps({"op": op, "setting": setting, "median_us": round(us, 2)}))
    for op in cases("cpu"):
        base = med[(op, "tpu_off")]
        line = {"op": op, "baseline": "tpu_off",
                "cpu_eager/tpu_off": round(med[(op, "cpu_eager")] / base, 3),
                "profiled_cpu_only/tpu_off": round(med[(op, "tpu_profiled_cpu_only")] / base, 3),
                "profiled_cpu_tpu/tpu_off": round(med[(op, "tpu_profiled_cpu_tpu")] / base, 3)}
        if args.before:
            line["off_this/off_before"] = round(
                med[(op, "tpu_off_this")] / med[(op, "tpu_off_before")], 3)
        print(json.dumps(line))


if __name__ == "__main__":
    main()
