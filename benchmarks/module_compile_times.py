"""Compile seconds per module under each XLA:CPU compile effort (issue 28): where a cold run's
compile time goes, and what each effort would save on exactly the modules it compiled.

    .venv/bin/python benchmarks/module_compile_times.py [--rounds 3] [--workload llama|cnn]

Runs benchmarks/cold_start.py's workload once cold with TORCHTPU_LOG_COMPILES=1,
TORCHTPU_DUMP_MLIR=1 and one compile thread (so each logged compile is followed by its own
module), writes each module to a file, builds benchmarks/module_compile_times.cpp against
build/libtorchtpu_pjrt.a and compiles every module under every effort (full, quick, quick_o0,
light: runtime::effort_for's option sets), best of --rounds each, efforts interleaved, in one
process with nothing else of torch around. Prints one JSON line per class of module (the effort
the run chose: full, quick or quick_o0) with its count and seconds under each effort, then a
total line whose `as_run_s` is the sum under the efforts the run chose. Run it alone: a busy host
skews every figure.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cold_start  # noqa: E402

HEADER = re.compile(
    r"^torchtpu: compiled (.*) in [0-9.]+ ms \(.*?\)(?: \[(quick|quick, O0|light)\])?$")
MODULE = re.compile(r"^module @torchtpu \{\n.*?^\}\n", re.M | re.S)
TAGS = {None: "full", "quick": "quick", "quick, O0": "quick_o0", "light": "light"}


def plugin_dir() -> str:
    import xla_plugins.xla_cpu_pjrt as m
    return os.path.dirname(m.__file__)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workload", default="llama", choices=["llama", "cnn"])
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="module_compile_times_")
    cold_start.PIN_THREADS = True
    run = cold_start.run_child("tpu", a.workload, os.path.join(work, "cache"),
                               TORCHTPU_LOG_COMPILES="1", TORCHTPU_DUMP_MLIR="1",
                               TORCHTPU_COMPILE_THREADS="1")
    log = run["log"]
    headers = [HEADER.match(line) for line in log.splitlines()]
    headers = [m for m in headers if m]
    modules = MODULE.findall(log)
    if len(headers) != len(modules):
        raise SystemExit(f"{len(headers)} compiles logged but {len(modules)} modules dumped")
    files, tag_of = [], {}
    for i, (h, text) in enumerate(zip(headers, modules)):
        path = os.path.join(work, f"{i:04d}.mlir")
        with open(path, "w") as f:
            f.write(text)
        files.append(path)
        tag_of[path] = TAGS[h.group(2)]
    exe = os.path.join(work, "module_compile_times")
    subprocess.run(["g++", "-O2", "-std=c++17", "-I" + os.path.join(ROOT, "csrc"),
                    "-I" + os.path.join(plugin_dir(), "include"),
                    os.path.join(HERE, "module_compile_times.cpp"),
                    os.path.join(ROOT, "build", "libtorchtpu_pjrt.a"), "-ldl", "-lpthread",
                    "-o", exe], check=True)
    env = dict(os.environ, TORCHTPU_TEST_PLUGIN=os.path.join(plugin_dir(), "xla_cpu_pjrt.so"))
    out = subprocess.run([exe, str(a.rounds)] + files, env=env, check=True, capture_output=True,
                         text=True).stdout
    by_class = collections.defaultdict(lambda: collections.defaultdict(float))
    total = collections.defaultdict(float)
    for line in out.splitlines():
        path, *fields = line.split()
        ms = {k: float(v) for k, v in (f.split("=") for f in fields)}
        cls = tag_of[path]
        by_class[cls]["modules"] += 1
        for effort, t in ms.items():
            by_class[cls][effort + "_s"] += t / 1000
            total[effort + "_s"] += t / 1000
        total["as_run_s"] += ms[cls] / 1000
    print(json.dumps({"host": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]},
                      "workload": a.workload, "modules": len(files), "rounds": a.rounds}))
    for cls, row in sorted(by_class.items()):
        print(json.dumps({"class": cls, **{k: round(v, 3) for k, v in row.items()}}))
    print(json.dumps({"class": "all", **{k: round(v, 3) for k, v in total.items()}}))


if __name__ == "__main__":
    main()
