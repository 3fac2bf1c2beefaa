"""The programs a mixed workload compiles are the ones recorded in engine_programs.sha256.

Disk cache entries are keyed by a program's text, so a refactor of the engine (csrc/exec/,
exec/executor.cpp, exec/graph_executor.cpp, exec/call_state.cpp) that changes any module it emits
silently invalidates every user's cache. engine_workload.py covers eager ops of every variant,
views with runtime offsets, CPU scalars, generators, complex, compiled graphs and optimizer
steps; this test runs it under TORCHTPU_DUMP_MLIR=1 and compares the SHA-256 of every module it
compiles with the recorded list, once with size buckets (the default on XLA:CPU/GPU:
engine_programs_buckets.sha256) and once without (engine_programs.sha256). A change that is
meant to change programs updates the lists:

    for b in 0 1; do TORCHTPU_PJRT_PLUGIN=... TORCHTPU_DUMP_MLIR=1 TORCHTPU_CACHE=0 \\
        TORCHTPU_CPU_DEVICE_COUNT=1 TORCHTPU_SIZE_BUCKETS=$b python tests/python/engine_workload.py \\
        2>&1 | python tests/python/test_engine_programs.py $b; done

(Results are not compared here: bit-identical results across builds are checked by running
`engine_workload.py OUT.pt` on both and comparing the saved tensors.)
"""

from __future__ import annotations

import hashlib
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDED = {"0": os.path.join(HERE, "engine_programs.sha256"),
            "1": os.path.join(HERE, "engine_programs_buckets.sha256")}


def module_hashes(stderr: str) -> list[str]:
    modules = re.findall(r"^module @torchtpu \{\n.*?^\}\n", stderr, re.M | re.S)
    return sorted(hashlib.sha256(m.encode()).hexdigest() for m in modules)


@pytest.mark.parametrize("buckets", ["0", "1"])
def test_workload_compiles_the_recorded_programs(run_python, tmp_path, buckets):
    workload = os.path.join(HERE, "engine_workload.py")
    code = f"import runpy, sys; sys.argv = ['w']; runpy.run_path({workload!r})"
    r = run_python(code, timeout=600, TORCHTPU_DUMP_MLIR="1", TORCHTPU_CACHE="0",
                   TORCHTPU_CPU_DEVICE_COUNT="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path),
                   TORCHTPU_SIZE_BUCKETS=buckets)
    got = module_hashes(r.stderr)
    want = open(RECORDED[buckets]).read().split()
    assert got, r.stderr[-2000:]
    assert got == want, (
        f"{len(set(got) - set(want))} programs are new and {len(set(want) - set(got))} are gone: "
        "the engine emits other modules than before, which invalidates disk caches (see this "
        "file's docstring to record the new list when that is intended)")


if __name__ == "__main__":
    with open(RECORDED[sys.argv[1]], "w") as f:
        f.write("\n".join(module_hashes(sys.stdin.read())) + "\n")
