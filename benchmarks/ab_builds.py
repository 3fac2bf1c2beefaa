"""A/B two builds of torchtpu on one benchmark, interleaved, so both see the same machine load.

    python benchmarks/ab_builds.py --before DIR --after DIR [--rounds 5] benchmarks/eager_overhead.py
    python benchmarks/ab_builds.py --before DIR --after DIR --rounds 2 benchmarks/cold_start.py --only llama

Each DIR holds a `torchtpu` package with its built `_C` extension (a copy of the repository's
torchtpu/ folder taken after building that commit) and optionally a file COMMIT naming the commit.
The benchmark runs `--rounds` times per build, before and after alternating, each in a fresh
process with DIR first on PYTHONPATH. Every JSON line it prints is echoed with "build", "commit"
and "round" added; then one summary line per (op, build) gives the median tpu/cpu ratio over the
rounds and its spread (each process measures its own CPU baseline).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def run_once(script, pkg_dir, args=()):
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_dir + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, script, *args], env=env, check=True, capture_output=True,
                         text=True).stdout
    lines = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def commit_of(pkg_dir):
    path = os.path.join(pkg_dir, "COMMIT")
    return open(path).read().strip() if os.path.exists(path) else "unknown"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="passed on to the script")
    a = p.parse_args()
    builds = {"before": a.before, "after": a.after}
    ratios = {}
    for r in range(a.rounds):
        for build, pkg_dir in builds.items():
            for obj in run_once(a.script, pkg_dir, a.args):
                obj.update(build=build, commit=commit_of(pkg_dir), round=r)
                print(json.dumps(obj), flush=True)
                if obj.get("device") == "tpu/cpu":
                    ratios.setdefault((obj["op"], build), []).append(obj["ratio"])
                elif "workload_ratio" in obj:  # cold_start.py's ratio lines
                    name = f'{obj["workload"]} {obj["run"]}'
                    ratios.setdefault((name, build), []).append(obj["workload_ratio"])
    for (op, build), rs in ratios.items():
        print(json.dumps({"op": op, "build": build, "commit": commit_of(builds[build]),
                          "summary": "tpu/cpu ratio over rounds",
                          "median_ratio": round(statistics.median(rs), 2),
                          "min_ratio": round(min(rs), 2), "max_ratio": round(max(rs), 2),
                          "rounds": len(rs)}))


if __name__ == "__main__":
    main()
