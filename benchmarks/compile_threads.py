"""How much would compiling on more threads buy on this machine? The ceiling of a compile pool.

A fresh process (disk cache off) compiles the same set of distinct eager programs (small
elementwise chains and reductions, one program per shape, like a cold workload's) either all on
one Python thread or split across N threads, each thread issuing its own ops: torch releases the
GIL in its ops, and the program cache lets different signatures compile at once, so the threads'
XLA compiles overlap as far as the machine's free cores allow. Prints one JSON line per run (wall
seconds for the compiles, summed compile seconds, process CPU seconds) and the N-thread/1-thread
ratio, rounds interleaved (shared, noisy host).

    .venv/bin/python benchmarks/compile_threads.py [--programs 96] [--threads 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

CHILD = r"""
import json, os, resource, sys, threading, time
import torch, torchtpu
programs, threads = int(sys.argv[1]), int(sys.argv[2])
shapes = [(2, 3 + k) for k in range(programs)]  # one signature per shape and op below
xs = {s: torch.randn(s).to("tpu") for s in shapes}
torch.tpu.synchronize()
ops = [lambda x: x * 1.5, lambda x: x.exp(), lambda x: x.sum(1)]
work = [(s, op) for s in shapes for op in ops][:programs]

def run(part):
    for s, op in part:
        op(xs[s])

before = torchtpu.metrics()
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
start = time.perf_counter()
ts = [threading.Thread(target=run, args=(work[i::threads],)) for i in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
torch.tpu.synchronize()
wall = time.perf_counter() - start
cpu1 = resource.getrusage(resource.RUSAGE_SELF)
m = torchtpu.metrics()
print("RESULT " + json.dumps({
    "threads": threads, "wall_s": round(wall, 3),
    "programs_compiled": m["programs_compiled"] - before["programs_compiled"],
    "compile_s": round(m["compile_seconds"] - before["compile_seconds"], 3),
    "cpu_s": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 3)}))
"""


def child(programs: int, threads: int) -> dict:
    env = dict(os.environ, TORCHTPU_CACHE="0")
    env.pop("TORCHTPU_LOG_COMPILES", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(programs),
                           str(threads)], env=env, capture_output=True, text=True, timeout=1200)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(proc.stderr[-4000:])
    return json.loads(line[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--programs", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    one, many = [], []
    for _ in range(args.rounds):
        one.append(child(args.programs, 1))
        many.append(child(args.programs, args.threads))
        print(json.dumps(one[-1]), flush=True)
        print(json.dumps(many[-1]), flush=True)
    best = lambda runs: min(r["wall_s"] for r in runs)
    print(json.dumps({"run": f"{args.threads}_threads/1_thread", "programs": args.programs,
                      "wall_ratio": round(best(many) / best(one), 2),
                      "cpu_load_1min": os.getloadavg()[0], "cores": os.cpu_count()}), flush=True)


if __name__ == "__main__":
    main()
