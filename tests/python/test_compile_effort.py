"""Compile effort matched to the program (TORCHTPU_LIGHT_COMPILE=1, opt-in; runtime::effort_for): small eager op programs compile first at a low XLA backend optimization
level, large ones and compiled graphs at full effort, and a light program that has launched
TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER times compiles again at full effort in the background
(Program::upgrade_when_hot). The rule shows in the compile log ("[light]", "[upgrade]"); results
match the CPU either way. Variables are read once per process, so each case runs a fresh
interpreter.
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


UPGRADE = r"""
import json, torch, torchtpu
torch.manual_seed(0)
x = torch.randn(64, 32)
t = x.to("tpu")
light = [torch.tanh(t * 1.5 + 0.25).cpu() for _ in range(10)]
torchtpu.finish_background_compiles()
upgraded = torchtpu.metrics()["programs_upgraded"]
full = [torch.tanh(t * 1.5 + 0.25).cpu() for _ in range(3)]
want = torch.tanh(x * 1.5 + 0.25)
# A light and a full program may differ in the last bits (an FMA the full one forms): close to
# each other and to the CPU, each stable over its own calls.
print("RESULT " + json.dumps({
    "upgraded": upgraded,
    "stable": all(torch.equal(a, light[0]) for a in light) and
              all(torch.equal(a, full[0]) for a in full),
    "close": bool(torch.allclose(full[0], light[0], rtol=1e-6, atol=1e-6)) and
             bool(torch.allclose(full[0], want, rtol=1e-5, atol=1e-6)),
}))
"""


def _upgrade_run(run_python, **env):
    r = run_python(UPGRADE, timeout=600, TORCHTPU_CACHE="0", TORCHTPU_LOG_COMPILES="1",
                   TORCHTPU_LIGHT_COMPILE="1", **env)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), r.stderr


def test_hot_light_programs_upgrade_to_full_effort_with_the_same_values(run_python):
    result, stderr = _upgrade_run(run_python)
    # mul, add and tanh each launched 10 times (more than 8): each upgraded once.
    assert result["upgraded"] >= 3, (result, stderr[-3000:])
    upgrades = [line for line in stderr.splitlines() if line.endswith("[upgrade]")]
    assert any("aten::tanh" in line and "upgrading to full effort" in line
               for line in upgrades), stderr[-3000:]
    assert result["stable"] and result["close"], result


def test_light_programs_stay_light_when_upgrades_are_off(run_python):
    result, stderr = _upgrade_run(run_python, TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER="0")
    assert result["upgraded"] == 0, result
    assert not [line for line in stderr.splitlines() if line.endswith("[upgrade]")]
    assert result["stable"] and result["close"], result


def test_exit_with_queued_upgrades_is_clean(run_python):
    # Hot programs queue their upgrades, which wait for a quiet pool. Exit drops the queued ones
    # and waits for a running one: no compile may still be inside the plugin while exit()
    # destroys its statics (issue 32's SIGABRT/SIGSEGV).
    code = ("import torch, torchtpu\n"
            "t = torch.randn(64, 32).to('tpu')\n"
            "for _ in range(12): u = torch.tanh(t * 1.5 + 0.25)\n"
            "print('SUM', float(u.sum()))\n")
    for _ in range(3):
        r = run_python(code, timeout=120, TORCHTPU_CACHE="0", TORCHTPU_LIGHT_COMPILE="1")
        assert r.returncode == 0 and "SUM" in r.stdout, r.stderr[-2000:]
        assert "LLVM ERROR" not in r.stderr


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
