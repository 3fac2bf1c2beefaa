"""Programs a cold run of some test files compiles, with and without an environment variable
(issue 28's "the Hugging Face test files compile at most a third of the programs"):

    python benchmarks/test_file_programs.py [--var TORCHTPU_SIZE_BUCKETS] [--values 0 1] \\
        [tests/python/test_hf_models.py ...]

Each value runs the files once in pytest with empty caches (torchtpu's and PyTorch's) and
TORCHTPU_LOG_COMPILES=1, which prints one line per XLA compile (subprocesses of the tests
included). One JSON line per value: {"var", "value", "compiles", "top_ops" (compiles of the most
compiled ops), "result" (pytest's summary line), "wall_s", "ratio_to_first" (compiles against the
first value's)}, after a line with the host's load. Same test results is part of the claim: compare
the summaries.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

DEFAULT_FILES = ["tests/python/test_hf_models.py", "tests/python/test_hf_generation.py",
                 "tests/python/test_hf_pipelines.py"]
# A hot program's background upgrade (a line ending "[upgrade]") is not another program.
COMPILED = re.compile(r"^torchtpu: compiled (\S+?)\((?!.*\[upgrade\]$)", re.M)


def run(files, var, value):
    cache = tempfile.mkdtemp(prefix="torchtpu-test-programs-")
    env = dict(os.environ, TORCHTPU_LOG_COMPILES="1", TORCHTPU_CACHE_DIR=cache,
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "torch"), **{var: value})
    start = time.perf_counter()
    # -s: the compile lines go to the terminal's stream (here, our pipe), not pytest's capture.
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                        *files], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    text = r.stdout + r.stderr
    ops = collections.Counter(COMPILED.findall(text))
    summary = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return {"var": var, "value": value, "compiles": sum(ops.values()),
            "top_ops": dict(ops.most_common(10)), "result": summary[-1] if summary else text[-300:],
            "wall_s": round(wall, 1)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--var", default="TORCHTPU_SIZE_BUCKETS")
    p.add_argument("--values", nargs="+", default=["0", "1"])
    p.add_argument("files", nargs="*", default=DEFAULT_FILES)
    args = p.parse_args()
    print(json.dumps({"host": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]},
                      "files": args.files}), flush=True)
    first = None
    for value in args.values:
        result = run(args.files, args.var, value)
        first = first or result["compiles"]
        result["ratio_to_first"] = round(result["compiles"] / max(first, 1), 3)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
