"""The eager program cache: a repeated call compiles nothing, Python scalars are runtime
arguments (changing them never recompiles), what does change the signature (shape, dtype,
layout, device) compiles once more, and TORCHTPU_LOG_COMPILES=1 prints one line per compile
naming the op."""

import re

import torch
from torch.testing import assert_close

import torchtpu


def compiled():
    """Programs built: compiled by XLA, or loaded from the on-disk compilation cache when one is
    enabled (a program cache miss either way). A program cache hit adds to neither."""
    m = torchtpu.metrics()
    return m["programs_compiled"] + m.get("disk_cache_hits", 0)


def warm(fn, *args):
    """Runs fn once (compiling whatever it needs) and returns the compile count after it."""
    fn(*args)
    torch.tpu.synchronize()
    return compiled()


def test_identical_call_compiles_nothing():
    x = torch.randn(5, 7).to("tpu")
    y = torch.randn(5, 7).to("tpu")
    f = lambda a, b: (a * b + a).exp().sum(1)
    before = warm(f, x, y)
    hits = torchtpu.metrics()["cache_hits"]
    out = f(x, y)
    assert compiled() == before
    assert torchtpu.metrics()["cache_hits"] > hits
    # New tensors with the same signature reuse the programs too.
    x2, y2 = torch.randn(5, 7), torch.randn(5, 7)
    out2 = f(x2.to("tpu"), y2.to("tpu"))
    assert compiled() == before
    assert_close(out2.cpu(), f(x2, y2), rtol=1e-5, atol=1e-5)
    assert_close(out.cpu(), f(x.cpu(), y.cpu()), rtol=1e-5, atol=1e-5)


def test_changing_python_scalar_compiles_nothing():
    c = torch.randn(3, 4)
    x = c.to("tpu")
    warm(lambda: x * 2.0)
    before = compiled()
    for s in (3.5, -1.25, 1e-3, 7.0):
        assert_close((x * s).cpu(), c * s)
    assert compiled() == before
    warm(lambda: x + 1)
    before = compiled()
    for s in (2, -7, 100):
        assert_close((x + s).cpu(), c + s)
    assert compiled() == before


def test_default_dtype_is_part_of_the_signature():
    # An int tensor plus a Python float promotes to the default dtype, as on the CPU; the program
    # built before torch.set_default_dtype must not answer after it.
    c = torch.arange(3)
    x = c.to("tpu")
    assert (x + 1.5).dtype == torch.float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = x + 1.5
        assert got.dtype == (c + 1.5).dtype == torch.float64
        assert torch.equal(got.cpu(), c + 1.5)
    finally:
        torch.set_default_dtype(old)
    assert (x + 1.5).dtype == torch.float32


def test_changing_alpha_compiles_nothing():
    a, b = torch.randn(6), torch.randn(6)
    x, y = a.to("tpu"), b.to("tpu")
    warm(lambda: x.add(y, alpha=2.0))
    warm(lambda: torch.sub(x, y, alpha=2.0))
    before = compiled()
    for alpha in (0.5, -3.0, 10.0):
        assert_close(x.add(y, alpha=alpha).cpu(), a.add(b, alpha=alpha))
        assert_close(torch.sub(x, y, alpha=alpha).cpu(), torch.sub(a, b, alpha=alpha))
    assert compiled() == before


def test_changing_scalar_in_inplace_and_fill_compiles_nothing():
    x = torch.zeros(4, device="tpu")
    warm(lambda: x.add_(1.5))
    warm(lambda: x.fill_(2.0))
    warm(lambda: torch.full((4,), 3.0, device="tpu"))
    before = compiled()
    x.add_(2.5)
    x.fill_(-4.0)
    x.mul_(0.5)
    f = torch.full((4,), 9.0, device="tpu")
    assert compiled() <= before + 1  # mul_ is new; the rest are cached
    before = compiled()
    x.mul_(3.0)
    x.add_(7.25)
    assert compiled() == before
    assert_close(x.cpu(), torch.full((4,), -4.0 * 0.5 * 3.0 + 7.25))
    assert_close(f.cpu(), torch.full((4,), 9.0))


def test_changing_rng_seed_compiles_nothing():
    warm(lambda: torch.rand(8, device="tpu"))
    before = compiled()
    for seed in (1, 2, 3):
        torch.tpu.manual_seed(seed)
        torch.rand(8, device="tpu")
    assert compiled() == before


def test_signature_changes_compile_once():
    x = torch.randn(4, 3, device="tpu")
    other_shape = [torch.randn(5, 3, device="tpu") for _ in range(2)]
    as_f64 = x.to(torch.float64)
    warm(torch.neg, x)
    before = compiled()
    torch.neg(other_shape[0])  # new shape
    assert compiled() == before + 1
    torch.neg(other_shape[1])
    assert compiled() == before + 1
    torch.neg(x.t())  # new layout
    assert compiled() == before + 2
    torch.neg(as_f64)  # new dtype
    assert compiled() == before + 3
    torch.neg(as_f64)
    torch.neg(x.t())
    assert compiled() == before + 3


LOG_COMPILES = """
import torch, torchtpu
x = torch.ones(4, 4, device="tpu")
y = x * 2.0
y = x * 3.5            # cached: no line
z = torch.add(x, y, alpha=2)
z = torch.add(x, y, alpha=5)   # cached: no line
w = x.exp()
w = x.exp()            # cached: no line
torch.tpu.synchronize()
m = torchtpu.metrics()
print("COMPILED", m["programs_compiled"] + m.get("disk_cache_hits", 0))
"""


def test_log_compiles(run_python):
    proc = run_python(LOG_COMPILES, TORCHTPU_LOG_COMPILES="1")
    n = int(re.search(r"COMPILED (\d+)", proc.stdout).group(1))
    # One line per program built: "compiled OP(...)", or "loaded OP(...) from the disk cache".
    pattern = re.compile(r"torchtpu: (?:compiled|loaded) (aten::[\w.]+)\(")
    lines = [l for l in proc.stderr.splitlines() if pattern.match(l)]
    assert len(lines) == n, proc.stderr
    ops = [pattern.match(l).group(1) for l in lines]
    for op in ("aten::mul.Tensor", "aten::add.Tensor", "aten::exp"):
        assert ops.count(op) == 1, (op, lines)


def test_no_compile_log_by_default(capfd):
    """This process runs without TORCHTPU_LOG_COMPILES: compiling prints nothing."""
    capfd.readouterr()
    before = compiled()
    torch.arange(7.0, device="tpu").reshape(7, 1).cosh()  # a new signature
    assert compiled() > before
    err = capfd.readouterr().err
    assert "torchtpu: compiled" not in err and "torchtpu: loaded" not in err


NEAREST = """
import torch, torchtpu
a, b = torch.ones(4, 4).to("tpu"), torch.ones(4, 4).to("tpu")
c, d = torch.ones(8, 8).to("tpu"), torch.ones(8, 8).to("tpu")
e = torch.ones(1, 4).to("tpu")
torchtpu.reset_metrics()
torch.add(a, b)
torch.add(c, d)                           # the previous miss, but two arguments away
torch.add(a, e)
torch.tpu.synchronize()
print("RECOMPILES", torchtpu.metrics()["recompiles"])
for op, why in torchtpu.recompile_reasons():
    print("REASON", op, "|", why)
"""


def nearest_lines(proc):
    lines = [l for l in proc.stderr.splitlines() if l.startswith("torchtpu: compiled aten::add")]
    assert len(lines) == 3, proc.stderr
    # Compiles run on the compile pool, so their lines arrive in any order: put them in the
    # calls' order (each line's reason was decided at its call, in that order).
    calls = ["self=Float[4, 4], other=Float[4, 4]", "self=Float[8, 8]", "other=Float[1, 4]"]
    lines.sort(key=lambda l: next(i for i, c in enumerate(calls) if c in l.split(") in ")[0]))
    reasons = [l.split(" | ", 1) for l in proc.stdout.splitlines() if l.startswith("REASON")]
    return lines, reasons


def test_log_compiles_names_the_nearest_signature(run_python):
    # Exact programs' signatures (size buckets off): with them on, the 8x8 add runs the
    # size-generic program of its bucket and compiles no signature of its own to explain.
    proc = run_python(NEAREST, TORCHTPU_LOG_COMPILES="1", TORCHTPU_CACHE="0",
                      TORCHTPU_SIZE_BUCKETS="0")
    lines, reasons = nearest_lines(proc)
    assert "first call of aten::add.Tensor" in lines[0]
    assert ("nearest cached signature (of 1) aten::add.Tensor(self=Float[4, 4], other=Float[4, 4], "
            "alpha=default) differs in arg 0 (self): sizes [8, 8] vs [4, 4]; "
            "arg 1 (other): sizes [8, 8] vs [4, 4]") in lines[1], lines[1]
    # Nearest is the 4x4 call (only `other` differs), not the previous miss (8x8).
    assert ("aten::add.Tensor(self=Float[4, 4], other=Float[4, 4], alpha=default) differs in "
            "arg 1 (other): sizes [1, 4] vs [4, 4])") in lines[2], lines[2]
    assert "arg 0" not in lines[2].split("differs in", 1)[1]
    # The recompile counter and its reasons say the same (the first call is no recompile).
    assert "RECOMPILES 2" in proc.stdout
    assert [op for op, _ in reasons] == ["REASON aten::add.Tensor"] * 2
    assert reasons[1][1] in lines[2]


def test_nearest_signature_is_a_cached_one(run_python):
    # With room for one program, the 4x4 program is evicted by the 8x8 one: the third call is
    # explained against what the cache holds (8x8), not against a program it no longer has.
    proc = run_python(NEAREST, TORCHTPU_LOG_COMPILES="1", TORCHTPU_CACHE="0",
                      TORCHTPU_PROGRAM_CACHE_MAX_ENTRIES="1", TORCHTPU_SIZE_BUCKETS="0")
    lines, reasons = nearest_lines(proc)
    assert ("nearest cached signature (of 1) aten::add.Tensor(self=Float[8, 8], other=Float[8, 8], "
            "alpha=default) differs in arg 0 (self): sizes [4, 4] vs [8, 8]; "
            "arg 1 (other): sizes [1, 4] vs [8, 8]") in lines[2], lines[2]
    assert len(reasons) == 2


SHARED_MODULE = """
import torch, torchtpu
a, b = torch.randn(6, 9), torch.randn(6, 9)
x, y = a.to("tpu"), b.to("tpu")
out = x + y                                  # compiles add's module
z = x.clone()
m = torchtpu.metrics()
z.add_(y)                                    # another signature, the same module
after = torchtpu.metrics()
torch.testing.assert_close(out.cpu(), a + b)
torch.testing.assert_close(z.cpu(), a + b)
print("COMPILED", after["programs_compiled"] - m["programs_compiled"])
print("SHARED", after["programs_shared"] - m["programs_shared"])
print("DISK_HITS", after["disk_cache_hits"] - m["disk_cache_hits"])
"""


def test_identical_modules_compile_once_per_process(run_python, tmp_path):
    # add and add_ on whole tensors lower to the same module: the second signature reuses the
    # executable in memory, with the disk cache off and on (no disk read either).
    for env in ({"TORCHTPU_CACHE": "0"}, {"TORCHTPU_CACHE_DIR": str(tmp_path / "cache")}):
        proc = run_python(SHARED_MODULE, **env)
        out = dict(line.split() for line in proc.stdout.splitlines() if line.count(" ") == 1)
        assert out == {"COMPILED": "0", "SHARED": "1", "DISK_HITS": "0"}, (env, proc.stdout)


def test_graph_recompile_names_the_nearest_cached_signature():
    # One compiled graph fed views of storages of two sizes: the same graph for Dynamo, two
    # programs for torchtpu; the second miss names the first signature and what differs.
    g = torch.compile(lambda x: x.sin() + 1, backend="tpu", dynamic=False)
    recompiles = torchtpu.metrics()["recompiles"]
    for k in (13, 14):
        base = torch.arange(float(k))
        got = g(base.to("tpu")[:12].view(3, 4)).cpu()
        torch.testing.assert_close(got, base[:12].view(3, 4).sin() + 1)
    assert torchtpu.metrics()["recompiles"] == recompiles + 1
    op, why = torchtpu.recompile_reasons()[-1]
    assert op.startswith("graph g"), op
    assert "(input0=Float[3, 4] (view of Float[13]))" in why, why
    assert why.endswith("differs in arg 0 (input0): storage dims [14] vs [13]"), why
