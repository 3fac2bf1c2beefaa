"""A/B one environment variable of torchtpu on a benchmark, interleaved, in one build.

    python benchmarks/ab_env.py --var TORCHTPU_ASYNC_COMPILE --values 1 0 [--rounds 5] \\
        benchmarks/eager_overhead.py

The benchmark runs `--rounds` times per value, the values alternating, each in a fresh process
(torchtpu reads its variables once). Every JSON line it prints is echoed with the variable's
value and the round added; then one summary line per (op, value) gives the median tpu/cpu ratio
over the rounds and its spread (each process measures its own CPU baseline) with the 1-minute
load average at the end.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def run_once(script, var, value):
    env = dict(os.environ, **{var: value})
    out = subprocess.run([sys.executable, script], env=env, check=True, capture_output=True,
                         text=True).stdout
    return [json.loads(line) for line in map(str.strip, out.splitlines()) if line.startswith("{")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--var", required=True)
    p.add_argument("--values", nargs="+", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("script")
    a = p.parse_args()
    ratios = {}
    for r in range(a.rounds):
        for value in a.values:
            for obj in run_once(a.script, a.var, value):
                obj.update({a.var: value, "round": r})
                print(json.dumps(obj), flush=True)
                if obj.get("device") == "tpu/cpu":
                    ratios.setdefault((obj["op"], value), []).append(obj["ratio"])
    for (op, value), rs in ratios.items():
        print(json.dumps({"op": op, a.var: value, "summary": "tpu/cpu ratio over rounds",
                          "median_ratio": round(statistics.median(rs), 2),
                          "min_ratio": round(min(rs), 2), "max_ratio": round(max(rs), 2),
                          "rounds": len(rs), "loadavg_1m": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
