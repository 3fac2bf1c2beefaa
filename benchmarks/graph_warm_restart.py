"""Warm restart of a compiled model: what a fresh process with a warm disk cache pays in torchtpu's
graph executor before its first result, against the CPU's first call in the same run.

The tiny Llama train step of benchmarks/compile_step.py (forward, backward, AdamW) under
torch.compile(backend="tpu"): one process fills a private cache (torchtpu's and PyTorch's), then
--repeats warm processes each run the step twice (the second call has .grad and optimizer state:
new graphs). Each prints the wall time of those two calls (Dynamo's tracing and AOTAutograd's cache
included), the time spent inside the graph executables' run() (a miss there is where a graph is
lowered, printed and hashed, or found by its recipe; the rest of run() is the launch), the modules
lowered and the programs compiled. `cpu_first_ms` is the CPU eager baseline's two first calls,
measured in a fresh process of the same run.

    .venv/bin/python benchmarks/graph_warm_restart.py [--repeats 3]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
import torch
device = sys.argv[1]
if device == "tpu":
    import torchtpu
    from torchtpu import _dynamo as tpu_dynamo
from compile_step import build, train_step, sync
torch.set_num_threads(1)
model, opt, ids = build(device)
fn = (lambda m, ids: train_step(m, opt, ids)) if device == "cpu" else torch.compile(
    lambda m, ids: train_step(m, opt, ids), backend="tpu")
start = time.perf_counter()
for _ in range(2):
    loss = fn(model, ids)
    sync(device)
first_ms = (time.perf_counter() - start) * 1e3
out = {"first_ms": round(first_ms, 1), "loss": float(loss)}
if device == "tpu":
    m = torchtpu.metrics()
    stats = tpu_dynamo.graph_metrics().values()
    out.update(run_ms=round(sum(s.get("launch_seconds", 0) for s in stats) * 1e3, 1),
               graphs=len(stats), modules_lowered=m.get("modules_lowered"),
               programs_compiled=m["programs_compiled"],
               signature_hits=m["disk_cache_signature_hits"])
print(json.dumps(out))
"""


def child(device, env):
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", CHILD, device, here], env=env, capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--label", default="")
    args = p.parse_args()
    cache = tempfile.mkdtemp(prefix="torchtpu-graph-warm-")
    env = dict(os.environ, TORCHTPU_CACHE_DIR=os.path.join(cache, "tpu"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "torch"))
    cold = child("tpu", env)
    print(json.dumps({"label": args.label, "phase": "cold", **cold,
                      "loadavg_1m": round(os.getloadavg()[0], 2)}), flush=True)
    for i in range(args.repeats):
        cpu = child("cpu", dict(os.environ))
        warm = child("tpu", env)
        print(json.dumps({"label": args.label, "phase": "warm", "repeat": i, **warm,
                          "cpu_first_ms": cpu["first_ms"],
                          "ratio_to_cpu_first": round(warm["first_ms"] / cpu["first_ms"], 2),
                          "loadavg_1m": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
