"""Compile effort matched to the program (TORCHTPU_LIGHT_COMPILE=1, runtime::effort_for): small
eager op programs compile at a low XLA backend optimization level, large ones and compiled graphs
at full effort. The rule shows in the compile log ("[light]"); results match the CPU either way.
Variables are read once per process, so each case runs a fresh interpreter.
"""

from __future__ import annotations

import json
import re

CODE = r"""
import json, torch, torchtpu
torch.manual_seed(0)
failures = []
def check(name, got, want):
    if not torch.allclose(got.cpu(), want, rtol=1e-4, atol=1e-4, equal_nan=True):
        failures.append(name)
small = torch.randn(64, 32)
large = torch.randn(512, 256)  # 131072 elements: above the default threshold (65536)
for name, x in (("small", small), ("large", large)):
    t = x.to("tpu")
    check(name + "_unary", torch.tanh(t * 1.5 + 0.25), torch.tanh(x * 1.5 + 0.25))
    check(name + "_reduce", t.sum(-1), x.sum(-1))
    check(name + "_softmax", t.softmax(-1), x.softmax(-1))
    check(name + "_matmul", t @ t.t(), x @ x.t())
f = torch.compile(lambda a: (a.sin() * 2 + 1).sum(0), backend="tpu")
check("graph", f(small.to("tpu")), (small.sin() * 2 + 1).sum(0))
print("RESULT " + json.dumps({"failures": failures}))
"""

COMPILED = re.compile(r"^torchtpu: compiled (.+?)\(.* in [0-9.]+ ms \(.*\)( \[light\])?$")


def compiles(stderr: str) -> list[tuple[str, bool]]:
    out = []
    for line in stderr.splitlines():
        m = COMPILED.match(line)
        if m:
            out.append((m.group(1), m.group(2) is not None))
    return out


def run(run_python, **env) -> list[tuple[str, bool]]:
    r = run_python(CODE, timeout=600, TORCHTPU_CACHE="0", TORCHTPU_LOG_COMPILES="1", **env)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1]
    assert json.loads(line[len("RESULT "):])["failures"] == []
    return compiles(r.stderr)


def test_light_compiles_only_small_eager_programs(run_python):
    logged = run(run_python, TORCHTPU_LIGHT_COMPILE="1")
    assert logged, "no compile was logged"
    light = [name for name, is_light in logged if is_light]
    full = [name for name, is_light in logged if not is_light]
    # Small eager ops compiled light; the large ones (and the graph) at full effort.
    assert any(name.startswith("aten::tanh") for name in light), logged
    assert any(name.startswith("aten::tanh") for name in full), logged
    # Every light program is a single eager op; the compiled graph is among the full ones.
    assert all(name.startswith("aten::") for name in light), logged
    assert any(not name.startswith("aten::") for name in full), logged


def test_light_compile_off_by_default(run_python):
    logged = run(run_python)
    assert logged and not any(is_light for _, is_light in logged), logged


def test_light_compile_threshold(run_python):
    # A threshold above every array: every eager op compiles light.
    logged = run(run_python, TORCHTPU_LIGHT_COMPILE="1",
                 TORCHTPU_LIGHT_COMPILE_MAX_ELEMENTS="1000000")
    eager = [(n, light) for n, light in logged if n.startswith("aten::")]
    assert eager and all(light for _, light in eager), logged


def test_bad_light_compile_level_is_a_clear_error(run_python):
    r = run_python("import torch, torchtpu\ntorch.ones(3, device='tpu').sin().cpu()\n",
                   check=False, TORCHTPU_LIGHT_COMPILE="1", TORCHTPU_LIGHT_COMPILE_LEVEL="7")
    assert r.returncode != 0
    assert "TORCHTPU_LIGHT_COMPILE_LEVEL" in r.stderr


def test_recipes_follow_the_light_compile_threshold(run_python, tmp_path):
    # Every eager op compiles light under a high threshold and its recipes go to the disk cache.
    # A restart with the default threshold must compile the large ops again at full effort, not
    # replay the recipes that name their light executables.
    cache = dict(TORCHTPU_CACHE="1", TORCHTPU_CACHE_DIR=str(tmp_path), TORCHTPU_LOG_COMPILES="1",
                 TORCHTPU_LIGHT_COMPILE="1")
    first = run_python(CODE, timeout=600, TORCHTPU_LIGHT_COMPILE_MAX_ELEMENTS="1000000", **cache)
    eager = [(n, light) for n, light in compiles(first.stderr) if n.startswith("aten::")]
    assert eager and all(light for _, light in eager), eager
    second = run_python(CODE, timeout=600, **cache)
    line = [x for x in second.stdout.splitlines() if x.startswith("RESULT ")][-1]
    assert json.loads(line[len("RESULT "):])["failures"] == []
    logged = compiles(second.stderr)
    assert any(n.startswith("aten::tanh") and not light for n, light in logged), logged
    # Same threshold again: everything replays from the disk cache, nothing eager compiles.
    third = run_python(CODE, timeout=600, **cache)
    assert not [n for n, _ in compiles(third.stderr) if n.startswith("aten::")], third.stderr[-2000:]
