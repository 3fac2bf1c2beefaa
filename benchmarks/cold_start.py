"""Cold start: what a fresh process pays before its first useful result, tpu vs PyTorch's CPU.

Every workload runs in a fresh interpreter (import cost included in `process_s`, excluded from
`workload_s`): once on the CPU (the baseline, same run), once on tpu with an empty compilation
cache (TORCHTPU_CACHE_DIR set to a new temporary folder: every program compiles), and once more
on tpu with that cache now warm (programs load from disk). Workloads: a tiny Llama (Transformers,
random weights) doing one eager train step at each of three sequence lengths, and a small CNN
doing one train step. Prints one JSON object per line, then tpu/cpu ratio lines.

The warm cache holds two kinds of entries: executables (keyed by their module) and recipes (keyed
by an op's typed signature, naming the executable). `tpu_warm` finds executables through recipes,
without lowering any op; `tpu_warm_by_module` runs on a copy of the warm cache without recipes,
so each op is lowered, printed and hashed to find its executable (how a warm restart worked
before recipes). With --repeats N every run repeats, interleaved round by round (CPU, cold on a
new empty cache, warm, warm by module), and each figure is the fastest of its N (this machine is
shared and noisy: a figure from one run against the fastest of several would skew the ratio).

With --profile, one more cold run logs every compile (TORCHTPU_LOG_COMPILES=1) and prints where
its compile seconds go: programs compiled, distinct described signatures (the rest differ only in
a layout detail the description leaves out, such as a contiguous view over a storage of other
dims), identical modules met under another signature (found in the cache, not compiled), the
compile time percentiles and the op families that cost most.

With --variants every round also runs tpu cold and warm under each named variant (issue 28), on a
cache of its own, each naming every switch: `exact` (neither: one program per shape, all at
full effort, the state before issue 28), `buckets` (TORCHTPU_SIZE_BUCKETS=1: size buckets and
size-generic elementwise programs), `light` (TORCHTPU_LIGHT_COMPILE=1: small eager op programs
compile first at a low XLA optimization level, at full effort once hot), `buckets+light`, and
`buckets+quick` (TORCHTPU_QUICK_COMPILE=1, small eager op programs that reduce nothing compile
first with XLA's elemental emitters, at full effort once hot) and `buckets+quick-O0` (XLA:CPU's
default: quick, and at LLVM level 0 those that sum no float product,
TORCHTPU_QUICK_COMPILE_O0=1); with --profile
each variant's cold run is profiled too. With --pin-threads every child (CPU
and tpu) calls torch.set_num_threads(1) with OMP_NUM_THREADS=1 before its workload.

What the figures include: `workload_s` runs from after `import torch` (and torchtpu) to the last
loss, so it includes importing Transformers (llama); `process_s` runs from the interpreter's
first line, so it adds importing torch and torchtpu. Each row's `includes` says so. `cpu_s` is the
process's CPU time (every thread: the compile pool's too) and `core_utilisation` that over
`process_s` times the host's cores: how busy a cold run keeps the machine (issue 28, item 3).

    .venv/bin/python benchmarks/cold_start.py [--only llama|cnn] [--repeats N] [--profile]
        [--sync-compile-ab] [--variants exact,buckets,light,buckets+light] [--pin-threads]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import time

CHILD = r"""
import json, os, sys, time
start = time.perf_counter()
import torch
device = sys.argv[1]
workload = sys.argv[2]
if os.environ.get("COLD_START_PIN_THREADS") == "1":
    torch.set_num_threads(1)
if device == "tpu":
    import torchtpu
torch.manual_seed(0)
imported = time.perf_counter()


def sync():
    if device == "tpu":
        torch.tpu.synchronize()


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256)
    model = LlamaForCausalLM(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for seq in (16, 32, 64):
        ids = torch.randint(0, 256, (2, seq)).to(device)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(out.loss.item())
    return losses


def cnn():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(8, 3, 32, 32).to(device)
    y = torch.randint(0, 10, (8,)).to(device)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return [loss.item()]


losses = {"llama": llama, "cnn": cnn}[workload]()
sync()
done = time.perf_counter()
# Issue 28 item 3: how busy the cores were. CPU time of every thread (compile pool included)
# against what all cores could give over the process's life.
cpu_s = time.process_time()
result = {"workload_s": done - imported, "process_s": done - start, "losses": losses,
          "cpu_s": cpu_s, "core_utilisation": cpu_s / ((done - start) * os.cpu_count())}
if device == "tpu":
    m = torchtpu.metrics()
    result.update(programs_compiled=m["programs_compiled"],
                  programs_upgraded=m.get("programs_upgraded", 0),
                  compile_s=round(m["compile_seconds"], 3),
                  disk_cache_hits=m["disk_cache_hits"],
                  disk_cache_signature_hits=m.get("disk_cache_signature_hits", 0),
                  executions=m["executions"],
                  host_syncs=m["host_syncs"])
print("RESULT " + json.dumps(result))
"""


def run_child(device: str, workload: str, cache_dir: str | None, **extra_env: str) -> dict:
    env = dict(os.environ)
    for k in ("TORCHTPU_LOG_COMPILES", "TORCHTPU_DUMP_MLIR", "TPU_LAUNCH_BLOCKING",
              "TORCHTPU_SIZE_BUCKETS", "TORCHTPU_LIGHT_COMPILE", "TORCHTPU_QUICK_COMPILE",
              "TORCHTPU_QUICK_COMPILE_O0"):
        env.pop(k, None)
    if PIN_THREADS:
        env.update(COLD_START_PIN_THREADS="1", OMP_NUM_THREADS="1")
    env.update(extra_env)
    if cache_dir is not None:
        env["TORCHTPU_CACHE_DIR"] = cache_dir
    wall = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), device, workload],
                          env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - wall
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{workload} on {device} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    result = json.loads(line[-1][len("RESULT "):])
    result["wall_s"] = wall
    if extra_env.get("TORCHTPU_LOG_COMPILES") == "1":
        result["log"] = proc.stderr
    return result


PIN_THREADS = False
VARIANTS = {
    "exact": {"TORCHTPU_SIZE_BUCKETS": "0", "TORCHTPU_LIGHT_COMPILE": "0",
              "TORCHTPU_QUICK_COMPILE": "0", "TORCHTPU_QUICK_COMPILE_O0": "0"},
    "buckets": {"TORCHTPU_SIZE_BUCKETS": "1", "TORCHTPU_LIGHT_COMPILE": "0",
                "TORCHTPU_QUICK_COMPILE": "0", "TORCHTPU_QUICK_COMPILE_O0": "0"},
    "light": {"TORCHTPU_SIZE_BUCKETS": "0", "TORCHTPU_LIGHT_COMPILE": "1",
              "TORCHTPU_QUICK_COMPILE": "0", "TORCHTPU_QUICK_COMPILE_O0": "0"},
    "buckets+light": {"TORCHTPU_SIZE_BUCKETS": "1", "TORCHTPU_LIGHT_COMPILE": "1",
                      "TORCHTPU_QUICK_COMPILE": "0", "TORCHTPU_QUICK_COMPILE_O0": "0"},
    "buckets+quick": {"TORCHTPU_SIZE_BUCKETS": "1", "TORCHTPU_LIGHT_COMPILE": "0",
                      "TORCHTPU_QUICK_COMPILE": "1", "TORCHTPU_QUICK_COMPILE_O0": "0"},
    "buckets+quick-O0": {"TORCHTPU_SIZE_BUCKETS": "1", "TORCHTPU_LIGHT_COMPILE": "0",
                         "TORCHTPU_QUICK_COMPILE": "1", "TORCHTPU_QUICK_COMPILE_O0": "1"},
}
INCLUDES = {
    "llama": "workload_s: import transformers, build a 2-layer Llama, 3 AdamW steps (seq 16/32/64)"
             " to the last loss; process_s adds interpreter start and import torch(+torchtpu)",
    "cnn": "workload_s: build a 2-conv CNN, 1 SGD step to the loss; process_s adds interpreter"
           " start and import torch(+torchtpu)",
}


def compile_profile(workload: str, cache_dir: str, variant: str = "") -> dict:
    """A cold run's compile log, summarized (see --profile)."""
    r = run_child("tpu", workload, cache_dir, TORCHTPU_LOG_COMPILES="1",
                  **VARIANTS.get(variant, {}))
    compiled = re.compile(
        r"^torchtpu: compiled (.*) in ([0-9.]+) ms \((.*)\)(?: \[(light|quick|quick, O0)\])?$")
    loaded = re.compile(r"^torchtpu: loaded (.*) from the disk cache in ([0-9.]+) ms")
    times, sigs, by_op, shared = [], collections.Counter(), collections.defaultdict(float), 0
    by_class = collections.defaultdict(lambda: [0, 0.0])  # eager op / graph, light / full
    for line in r["log"].splitlines():
        m = compiled.match(line)
        if m:
            ms = float(m.group(2))
            times.append(ms)
            sigs[m.group(1)] += 1
            by_op[m.group(1).split("(")[0]] += ms
            cls = ("eager" if m.group(1).startswith("aten::") else "graph") + (
                "_" + (m.group(4) or "full").replace(", ", "_"))
            by_class[cls][0] += 1
            by_class[cls][1] += ms / 1000
        elif loaded.match(line):
            shared += 1  # a module compiled earlier in this run under another signature
    times.sort()
    total = sum(times)
    pct = lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 1) if times else 0
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:12]
    return {
        "workload": workload,
        "run": "tpu_cold_profile" + (f"+{variant}" if variant else ""),
        "workload_s": round(r["workload_s"], 3), "compile_s": r["compile_s"],
        "compile_share": round(r["compile_s"] / r["workload_s"], 2),
        "programs_compiled": r["programs_compiled"], "compiles_logged": len(times),
        "distinct_described_signatures": len(sigs),
        "compiles_differing_only_in_layout_details": sum(v - 1 for v in sigs.values()),
        "identical_modules_reused": shared,
        "compile_ms_p10_p50_p90_max": [pct(0.1), pct(0.5), pct(0.9), pct(1.0)],
        "compiles_and_seconds_by_class": {k: [n, round(s, 2)] for k, (n, s) in
                                          sorted(by_class.items())},
        "top_ops_compile_share": {op: round(ms / total, 3) for op, ms in top} if total else {},
        "top_ops_compiles": {op: sum(v for s, v in sigs.items() if s.split("(")[0] == op)
                             for op, _ in top},
    }


def is_recipe(path: str) -> bool:
    """A recipe entry's payload starts with its executable's key: u64 64, then 64 hex digits
    (entry layout: csrc/runtime/disk_cache.cpp; tests/python/test_disk_cache.py)."""
    with open(path, "rb") as f:
        data = f.read()
    (key_len,) = struct.unpack_from("<I", data, 12)
    payload = data[16 + key_len + 40:]
    return (len(payload) >= 72 and struct.unpack_from("<Q", payload, 0)[0] == 64
            and all(c in b"0123456789abcdef" for c in payload[8:72]))


def copy_without_recipes(src: str, dst: str) -> None:
    shutil.copytree(src, dst)
    for name in os.listdir(dst):
        path = os.path.join(dst, name)
        if name.endswith(".entry") and is_recipe(path):
            os.unlink(path)


def fastest(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["workload_s"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["llama", "cnn"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="one more cold run with its compile log summarized")
    parser.add_argument("--sync-compile-ab", action="store_true",
                        help="each round also runs tpu cold with TORCHTPU_ASYNC_COMPILE=0 "
                             "(compiles on the op's thread, as before the compile pool)")
    parser.add_argument("--variants", default="",
                        help="comma-separated: each round also runs tpu cold and warm under each "
                             f"of these ({', '.join(VARIANTS)})")
    parser.add_argument("--pin-threads", action="store_true",
                        help="torch.set_num_threads(1) and OMP_NUM_THREADS=1 in every child")
    args = parser.parse_args()
    global PIN_THREADS
    PIN_THREADS = args.pin_threads
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            parser.error(f"unknown variant {v!r}: expected some of {', '.join(VARIANTS)}")
    workloads = [args.only] if args.only else ["llama", "cnn"]
    for workload in workloads:
        with tempfile.TemporaryDirectory(prefix="torchtpu-cold-") as tmp:
            cpu, cold, warm, by_module, cold_sync = [], [], [], [], []
            by_variant = {v: ([], []) for v in variants}
            for i in range(args.repeats):
                # Each round: the CPU, then tpu cold on a cache of its own (empty), then warm.
                cpu.append(run_child("cpu", workload, None))
                cache_dir = os.path.join(tmp, f"cache-{i}")
                cold.append(run_child("tpu", workload, cache_dir))
                if args.sync_compile_ab:
                    cold_sync.append(run_child("tpu", workload, os.path.join(tmp, f"sync-{i}"),
                                               TORCHTPU_ASYNC_COMPILE="0"))
                warm.append(run_child("tpu", workload, cache_dir))
                module_dir = os.path.join(tmp, f"modules-{i}")
                copy_without_recipes(cache_dir, module_dir)
                by_module.append(run_child("tpu", workload, module_dir))
                for v, (cold_v, warm_v) in by_variant.items():
                    variant_dir = os.path.join(tmp, f"{v}-{i}")
                    cold_v.append(run_child("tpu", workload, variant_dir, **VARIANTS[v]))
                    warm_v.append(run_child("tpu", workload, variant_dir, **VARIANTS[v]))
            every = {"cpu": cpu, "tpu_cold": cold, "tpu_warm": warm,
                     "tpu_warm_by_module": by_module}
            if cold_sync:
                every["tpu_cold_sync_compile"] = cold_sync
            for v, (cold_v, warm_v) in by_variant.items():
                every[f"tpu_cold+{v}"] = cold_v
                every[f"tpu_warm+{v}"] = warm_v
            runs = {name: fastest(rs) for name, rs in every.items()}
        for name, r in runs.items():
            row = {"workload": workload, "run": name, "pin_threads": args.pin_threads}
            if args.repeats > 1:
                row["every_workload_s"] = [round(x["workload_s"], 2) for x in every[name]]
            row.update({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                        if k != "losses"})
            row["losses"] = [round(x, 4) for x in r["losses"]]
            row["includes"] = INCLUDES[workload]
            print(json.dumps(row), flush=True)
        if args.profile:
            with tempfile.TemporaryDirectory(prefix="torchtpu-cold-") as tmp:
                print(json.dumps(compile_profile(workload, os.path.join(tmp, "cache"))),
                      flush=True)
                for v in variants:
                    print(json.dumps(compile_profile(workload, os.path.join(tmp, f"cache-{v}"),
                                                     v)), flush=True)
        for name in [n for n in runs if n != "cpu"]:
            print(json.dumps({
                "workload": workload, "run": f"{name}/cpu",
                "workload_ratio": round(runs[name]["workload_s"] / runs["cpu"]["workload_s"], 2),
                "process_ratio": round(runs[name]["process_s"] / runs["cpu"]["process_s"], 2),
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }), flush=True)


if __name__ == "__main__":
    main()
