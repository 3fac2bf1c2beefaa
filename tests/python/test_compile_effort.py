"""Compile effort matched to the program (runtime::effort_for): small eager op programs compile
first light (TORCHTPU_LIGHT_COMPILE=1, opt-in: a low XLA backend optimization level) or quick
(TORCHTPU_QUICK_COMPILE, XLA:CPU's default for programs that reduce nothing: XLA's elemental
emitters, the same bits; at LLVM level 0 where no float product is summed,
TORCHTPU_QUICK_COMPILE_O0), large ones and compiled graphs at full effort, and a light or quick
program that has launched TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER times compiles again at full effort
in the background (Program::upgrade_when_hot). The rule shows in the compile log ("[light]",
"[quick]", "[quick, O0]", "[upgrade]"); results match the CPU either way. Variables are read once
per process, so each case runs a fresh interpreter.
"""

from __future__ import annotations

import json
import pickle
import re

import torch

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

COMPILED = re.compile(
    r"^torchtpu: compiled (.+?)\(.* in [0-9.]+ ms \(.*\)(?: \[(light|quick)(, O0)?\])?$")


def tagged(stderr: str, level: bool = False) -> list[tuple[str, str]]:
    """(op or graph name, "light" | "quick" | "full") of every compile logged; with `level`,
    quick ones at LLVM level 0 are "quick, O0"."""
    out = []
    for line in stderr.splitlines():
        m = COMPILED.match(line)
        if m:
            out.append((m.group(1), (m.group(2) or "full") + ((m.group(3) or "") if level else "")))
    return out


def compiles(stderr: str) -> list[tuple[str, bool]]:
    return [(name, tag == "light") for name, tag in tagged(stderr)]


def run_logged(run_python, **env) -> str:
    r = run_python(CODE, timeout=600, TORCHTPU_CACHE="0", TORCHTPU_LOG_COMPILES="1", **env)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1]
    assert json.loads(line[len("RESULT "):])["failures"] == []
    return r.stderr


def run(run_python, **env) -> list[tuple[str, bool]]:
    return compiles(run_logged(run_python, **env))


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
first = [torch.tanh(t * 1.5 + 0.25).cpu() for _ in range(10)]
torchtpu.finish_background_compiles()
upgraded = torchtpu.metrics()["programs_upgraded"]
later = [torch.tanh(t * 1.5 + 0.25).cpu() for _ in range(3)]
want = torch.tanh(x * 1.5 + 0.25)
# A light and a full program may differ in the last bits (an FMA the full one forms): close to
# each other and to the CPU, each stable over its own calls. A quick one computes the very bits
# of the full one ("same").
print("RESULT " + json.dumps({
    "upgraded": upgraded,
    "stable": all(torch.equal(a, first[0]) for a in first) and
              all(torch.equal(a, later[0]) for a in later),
    "same": all(torch.equal(a, first[0]) for a in first + later),
    "close": bool(torch.allclose(later[0], first[0], rtol=1e-6, atol=1e-6)) and
             bool(torch.allclose(later[0], want, rtol=1e-5, atol=1e-6)),
}))
"""


def _upgrade_run(run_python, light="1", **env):
    r = run_python(UPGRADE, timeout=600, TORCHTPU_CACHE="0", TORCHTPU_LOG_COMPILES="1",
                   TORCHTPU_LIGHT_COMPILE=light, **env)
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


# ---- quick compiles (TORCHTPU_QUICK_COMPILE, XLA:CPU's default) ----


def test_quick_compiles_are_small_eager_programs_that_reduce_nothing(run_python):
    logged = tagged(run_logged(run_python))
    quick = {name for name, tag in logged if tag == "quick"}
    full = [name for name, tag in logged if tag == "full"]
    assert not [name for name, tag in logged if tag == "light"], logged
    # The small tanh, mul and add compile quick; the large tanh (131072 elements) at full effort.
    assert {"aten::tanh", "aten::mul.Tensor", "aten::add.Tensor"} <= quick, logged
    assert "aten::tanh" in full, logged
    # Reductions never compile quick (their summation order may differ between XLA:CPU's
    # emitters), whatever their size; nor does a compiled graph.
    assert not quick & {"aten::sum.dim_IntList", "aten::_softmax"}, logged
    assert any(name.startswith("aten::sum") for name in full), logged
    assert any(not name.startswith("aten::") for name in full), logged
    assert all(name.startswith("aten::") for name in quick), logged


def test_quick_compile_off(run_python):
    logged = tagged(run_logged(run_python, TORCHTPU_QUICK_COMPILE="0"))
    assert logged and all(tag == "full" for _, tag in logged), logged


# Ops whose programs compile quick, in float32 and bfloat16 where it applies: their values must be
# the very bits of the full-effort programs (a quick program upgrades once hot, and a value never
# changes with it). Odd sizes, so no kernel takes a vector-width-only path.
BITS = r"""
import pickle, torch, torchtpu
import torch.nn.functional as F
torch.manual_seed(0)
a, b = torch.randn(37, 53), torch.randn(37, 53)
c = torch.rand(37, 53) + 0.5
i = torch.randperm(37)[:29]  # distinct rows: index_put_ has one answer
def setitem(t, u):
    t[3:20, 5:17] = u[:17, :12] * 2
    return t
def bits(x, y):
    p, q = (x * 1000).int(), (y * 1000).int()
    return torch.stack([p & q, p | q, p ^ q, ~p, p.remainder(7)])
ops = {
    "exp": lambda: a.exp(), "expm1": lambda: a.expm1(), "log": lambda: c.log(),
    "log1p": lambda: c.log1p(), "tanh": lambda: a.tanh(), "sigmoid": lambda: a.sigmoid(),
    "erf": lambda: a.erf(), "erfinv": lambda: (c - 1).erfinv(), "sin": lambda: a.sin(),
    "cos": lambda: a.cos(), "tan": lambda: a.tan(), "atan": lambda: a.atan(),
    "asinh": lambda: a.asinh(), "rsqrt": lambda: c.rsqrt(), "sqrt": lambda: c.sqrt(),
    "gelu": lambda: F.gelu(a), "gelu_tanh": lambda: F.gelu(a, approximate="tanh"),
    "silu": lambda: F.silu(a), "mish": lambda: F.mish(a), "softplus": lambda: F.softplus(a),
    "elu": lambda: F.elu(a), "hardswish": lambda: F.hardswish(a),
    "add_alpha": lambda: torch.add(a, b, alpha=0.3), "sub": lambda: a - b, "mul": lambda: a * b,
    "div": lambda: a / c, "pow": lambda: c.pow(b), "atan2": lambda: torch.atan2(a, b),
    "fmod": lambda: torch.fmod(a, c), "remainder": lambda: torch.remainder(a, c),
    "hypot": lambda: torch.hypot(a, b), "maximum": lambda: torch.maximum(a, b),
    "addcmul": lambda: torch.addcmul(a, b, c, value=0.3),
    "addcdiv": lambda: torch.addcdiv(a, b, c, value=0.3), "lerp": lambda: torch.lerp(a, b, c),
    "where": lambda: torch.where(a > 0, a, b), "clamp": lambda: a.clamp(-0.5, 0.7),
    "bcast": lambda: a * b[:1] + c[:, :1], "to_bf16": lambda: a.to(torch.bfloat16),
    "to_half": lambda: a.half(), "to_int": lambda: (a * 100).int(),
    "to_double": lambda: a.double(), "int_to_float": lambda: (a * 100).int().float(),
    "half_add": lambda: a.half() + b.half(), "bf16_div": lambda: a.bfloat16() / c.bfloat16(),
    "bf16_mul": lambda: a.bfloat16() * b.bfloat16(), "mul_bcast": lambda: a * b[:1],
    "bf16_mul_add": lambda: a.bfloat16() * b.bfloat16() + c.bfloat16(),
    "bf16_gelu": lambda: F.gelu(a.bfloat16()), "half_tanh": lambda: a.half().tanh(),
    "slice_add": lambda: a[:, 1::2] + b[:, 2::2], "transpose": lambda: a.t().contiguous(),
    "cat": lambda: torch.cat([a, b], 1), "index_select": lambda: a.index_select(0, i),
    "embedding": lambda: F.embedding(i, a), "mm": lambda: a @ b.t(),
    "bmm": lambda: torch.bmm(a[None], b.t()[None]), "double": lambda: a.double().exp() * 3,
    "floor": lambda: (a * 3).floor(), "ceil": lambda: (a * 3).ceil(),
    "round": lambda: (a * 3).round(), "sign": lambda: a.sign(), "flip": lambda: a.flip(1),
    "minimum": lambda: torch.minimum(a, b), "abs_neg": lambda: -a.abs(),
    "slice_assign": lambda: a.clone().index_put_((i,), b[:29]),
    "setitem": lambda: setitem(a.clone(), b), "bits": lambda: bits(a, b),
}
a, b, c, i = (t.to("tpu") for t in (a, b, c, i))
pickle.dump({name: f().cpu() for name, f in ops.items()}, open(OUT, "wb"))
"""


def test_quick_programs_compute_the_bits_of_full_effort_ones(run_python, tmp_path):
    results = {}
    for quick in ("1", "0"):
        out = tmp_path / f"quick{quick}.pkl"
        r = run_python(f"OUT = {str(out)!r}\n" + BITS, timeout=600, TORCHTPU_CACHE="0",
                       TORCHTPU_LOG_COMPILES="1", TORCHTPU_QUICK_COMPILE=quick,
                       TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER="0")
        results[quick] = pickle.loads(out.read_bytes())
        if quick == "1":
            quick_ops = {name for name, tag in tagged(r.stderr) if tag == "quick"}
            o0_ops = {name for name, tag in tagged(r.stderr, level=True) if tag == "quick, O0"}
    # Most of these ops ran quick programs (an op lowering to a reduction does not).
    assert len(quick_ops) >= 30, quick_ops
    # Those whose every op rounds once and that sum no product ran at LLVM level 0 (a plain add:
    # its default alpha adds no product); a product summed (addcmul, lerp, an add with alpha)
    # or a polynomial (tanh, exp) did not.
    assert len(o0_ops) >= 20, o0_ops
    assert {"aten::mul.Tensor", "aten::add.Tensor", "aten::sub.Tensor", "aten::where.self",
            "aten::cat", "aten::div.Tensor", "aten::sqrt", "aten::clamp"} <= o0_ops, o0_ops
    assert not o0_ops & {"aten::addcmul", "aten::lerp.Tensor", "aten::tanh", "aten::exp",
                         "aten::erf", "aten::hypot", "aten::mm", "aten::bmm"}, o0_ops
    differ = [name for name in results["0"]
              if not torch.equal(results["0"][name], results["1"][name])]
    assert differ == [], differ


def test_hot_quick_programs_upgrade_with_the_same_bits(run_python):
    result, stderr = _upgrade_run(run_python, light="0")
    # mul, add and tanh compiled quick, each launched 10 times: each upgraded once, and the
    # upgraded program computes the quick one's very bits.
    assert result["upgraded"] >= 3, (result, stderr[-3000:])
    assert any("aten::tanh" in line and line.endswith("[quick]") for line in stderr.splitlines())
    assert any("aten::mul" in line and line.endswith("[quick, O0]") for line in stderr.splitlines())
    assert result["same"] and result["close"], result


def test_quick_compile_o0_off(run_python):
    logged = tagged(run_logged(run_python, TORCHTPU_QUICK_COMPILE_O0="0"), level=True)
    assert {"aten::mul.Tensor", "aten::add.Tensor"} <= {n for n, tag in logged if tag == "quick"}
    assert not [n for n, tag in logged if tag == "quick, O0"], logged
