"""The persistent compilation cache (csrc/runtime/disk_cache.cpp).

Every test runs fresh Python processes with TORCHTPU_CACHE_DIR under its own tmp_path, so the
developer's real cache (~/.cache/torchtpu) is never read or written here, and each process starts
with an empty in-memory program cache (only the disk can save it a compile).

Entry layout (checked directly by test_entry_format):
  magic b"TTPUXEC\\x1a" | format version u32 | key length u32 | key (hex) | payload length u64 |
  SHA-256(payload) | payload          (integers little-endian; file name <key>.entry)

Two kinds of entries share that format and the size bound: executables, keyed by their module,
and recipes, keyed by a typed signature (op, argument types and layouts, platform, this build),
whose payload names the executable's key; a warm process goes from the signature to the
executable through its recipe without lowering the op.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import textwrap
import time

import pytest

MAGIC = b"TTPUXEC\x1a"
FORMAT_VERSION = 1

# The child: runs the named ops on tpu and on CPU, prints whether all agree plus the metrics.
CHILD = textwrap.dedent(
    """
    import json, os, sys
    import torch, torchtpu

    torch.manual_seed(0)
    x = torch.randn(6, 5)
    y = torch.randn(6, 5).abs() + 0.5
    OPS = {
        "add": lambda a, b: a + b,
        "mul": lambda a, b: a * b,
        "sub": lambda a, b: a - b,
        "div": lambda a, b: a / b,
        "exp": lambda a, b: a.exp(),
        "log": lambda a, b: b.log(),
        "sin": lambda a, b: a.sin(),
        "cos": lambda a, b: a.cos(),
        "tanh": lambda a, b: a.tanh(),
        "sigmoid": lambda a, b: a.sigmoid(),
        "relu": lambda a, b: a.relu(),
        "sqrt": lambda a, b: b.sqrt(),
        "abs": lambda a, b: a.abs(),
        "neg": lambda a, b: a.neg(),
        "maximum": lambda a, b: torch.maximum(a, b),
        "sum": lambda a, b: a.sum(0),
    }
    xt, yt = x.to("tpu"), y.to("tpu")
    torchtpu.reset_metrics()  # count only the ops' programs, not the transfers'
    cache_dir = os.environ["TORCHTPU_CACHE_DIR"]

    def listing():
        return set(os.listdir(cache_dir)) if os.path.isdir(cache_dir) else set()

    bad, written = [], {}
    for name in sys.argv[1:]:
        before = listing()
        got = OPS[name](xt, yt).cpu()
        # Programs are compiled and stored before the op returns: new files are this op's.
        written[name] = sorted(listing() - before)
        if not torch.allclose(got, OPS[name](x, y), rtol=1e-4, atol=1e-5):
            bad.append(name)
    m = torchtpu.metrics()
    m.pop("cpu_fallbacks_by_op")
    print(json.dumps({"bad": bad, "metrics": m, "cache_dir": torchtpu._C._cache_dir(),
                      "written": written}))
    """
)

ALL_OPS = ["add", "mul", "sub", "div", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu",
           "sqrt", "abs", "neg", "maximum", "sum"]
OPS = ALL_OPS[:5]


def child_env(cache_dir, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHTPU_CACHE")}
    env["TORCHTPU_CACHE_DIR"] = str(cache_dir)
    # PyTorch's caches (AOTAutograd's holds our compiled-graph recipes) private to the test too.
    env["TORCHINDUCTOR_CACHE_DIR"] = f"{cache_dir}-torch".replace("/file/", "/")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start(cache_dir, ops, **extra):
    return subprocess.Popen([sys.executable, "-c", CHILD, *ops], env=child_env(cache_dir, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"child timed out:\n{err}")
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{err}"
    result = json.loads(out.strip().splitlines()[-1])
    result["stderr"] = err
    assert result["bad"] == [], f"wrong results for {result['bad']}"
    return result


def run(cache_dir, ops=OPS, **extra):
    return finish(start(cache_dir, ops, **extra))


def entries(cache_dir):
    if not cache_dir.exists():
        return []
    return sorted(p for p in cache_dir.iterdir() if p.name.endswith(".entry"))


def is_recipe(path):
    payload = parse(path)
    (n,) = struct.unpack_from("<Q", payload, 0)
    return n == 64 and all(c in b"0123456789abcdef" for c in payload[8:72])


def executables(cache_dir):
    return [p for p in entries(cache_dir) if not is_recipe(p)]


def recipes(cache_dir):
    return [p for p in entries(cache_dir) if is_recipe(p)]


def leftovers(cache_dir):
    return sorted(p.name for p in cache_dir.iterdir() if not p.name.endswith(".entry"))


def parse(path):
    """Returns the payload of a well-formed entry; fails the test otherwise."""
    data = path.read_bytes()
    assert data[:8] == MAGIC
    version, key_len = struct.unpack_from("<II", data, 8)
    assert version == FORMAT_VERSION
    key = data[16:16 + key_len].decode()
    assert path.name == key + ".entry"
    at = 16 + key_len
    (payload_len,) = struct.unpack_from("<Q", data, at)
    checksum = data[at + 8:at + 40]
    payload = data[at + 40:]
    assert len(payload) == payload_len
    # Also checks the C++ SHA-256 against hashlib on real multi-block data.
    assert hashlib.sha256(payload).digest() == checksum
    return payload


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """A cache filled by one process running OPS, and that process's result; tests copy it."""
    cache = tmp_path_factory.mktemp("golden") / "cache"
    return cache, run(cache)


def copy_of(golden, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(golden[0], cache)
    return cache


def test_second_process_compiles_nothing(golden, tmp_path):
    cache, first = golden[0], golden[1]
    m = first["metrics"]
    assert first["cache_dir"] == str(cache)
    assert m["programs_compiled"] == len(OPS)
    assert m["disk_cache_misses"] == len(OPS) and m["disk_cache_hits"] == 0
    assert m["disk_cache_writes"] == len(OPS)
    assert m["disk_cache_signature_writes"] == len(OPS)
    # Each op wrote its executable and its recipe.
    assert all(len(first["written"][op]) == 2 for op in OPS)
    assert len(executables(cache)) == len(recipes(cache)) == len(OPS)
    assert leftovers(cache) == []

    cache = copy_of(golden, tmp_path)
    second = run(cache)
    m = second["metrics"]
    assert m["programs_compiled"] == 0
    assert m["disk_cache_hits"] == len(OPS)
    # Every one reached through its recipe: no op was lowered to find its executable.
    assert m["disk_cache_signature_hits"] == len(OPS)
    assert m["disk_cache_misses"] == 0 and m["disk_cache_writes"] == 0
    assert m["disk_cache_signature_writes"] == 0
    assert m["disk_cache_corrupt"] == 0 and m["disk_cache_load_failures"] == 0
    assert second["written"] == {op: [] for op in OPS}
    assert len(entries(cache)) == 2 * len(OPS)


def test_entry_format(golden):
    for path in entries(golden[0]):
        assert len(path.stem) == 64 and all(c in "0123456789abcdef" for c in path.stem)
        assert len(parse(path)) > 0


def test_key_is_stable_across_folders(golden, tmp_path):
    # The key depends on the program and the platform, not on where the cache lives.
    r = run(tmp_path / "other", ["exp", "add"])
    assert r["written"] == {op: golden[1]["written"][op] for op in ["exp", "add"]}


def truncate(data):
    return data[: len(data) // 2]


def garble(data):
    b = bytearray(data)
    for i in range(len(b) // 2, len(b) // 2 + 16):
        b[i] ^= 0x5A
    return bytes(b)


def wrong_version(data):
    return data[:8] + struct.pack("<I", FORMAT_VERSION + 1) + data[12:]


def wrong_magic(data):
    return b"NOTANENT" + data[8:]


def trailing_bytes(data):
    return data + b"\0"


def empty(data):
    return b""


@pytest.mark.parametrize(
    "damage", [truncate, garble, wrong_version, wrong_magic, trailing_bytes, empty],
    ids=lambda f: f.__name__)
def test_damaged_entry_is_detected_removed_and_rewritten(golden, tmp_path, damage):
    cache = copy_of(golden, tmp_path)
    victim = executables(cache)[0]
    good = victim.read_bytes()
    victim.write_bytes(damage(good))

    m = run(cache)["metrics"]
    assert m["disk_cache_corrupt"] == 1
    assert m["programs_compiled"] == 1
    assert m["disk_cache_hits"] == len(OPS) - 1
    assert m["disk_cache_writes"] == 1
    # Replaced by a good entry (not byte-identical to the first: XLA output is not bitwise
    # deterministic; test_intact_entry_that_does_not_load_is_replaced reloads a rewritten one).
    parse(victim)
    assert leftovers(cache) == []


@pytest.mark.parametrize("damage", [truncate, garble, empty], ids=lambda f: f.__name__)
def test_damaged_recipe_falls_back_to_the_module(golden, tmp_path, damage):
    # The op is lowered again and finds its executable by its module: nothing compiles.
    cache = copy_of(golden, tmp_path)
    victim = recipes(cache)[0]
    victim.write_bytes(damage(victim.read_bytes()))
    m = run(cache)["metrics"]
    assert m["disk_cache_corrupt"] == 1 and m["programs_compiled"] == 0
    assert m["disk_cache_hits"] == len(OPS)
    assert m["disk_cache_signature_hits"] == len(OPS) - 1
    assert m["disk_cache_signature_writes"] == 1
    assert is_recipe(victim)
    assert leftovers(cache) == []


def test_recipe_of_an_evicted_executable(golden, tmp_path):
    cache = copy_of(golden, tmp_path)
    executables(cache)[0].unlink()
    m = run(cache)["metrics"]
    assert m["programs_compiled"] == 1 and m["disk_cache_corrupt"] == 0
    assert m["disk_cache_signature_hits"] == len(OPS) - 1
    assert len(executables(cache)) == len(recipes(cache)) == len(OPS)


def test_entry_for_another_key_is_detected(golden, tmp_path):
    # A file under the wrong name (a collision in the file name, or a copy) is not used.
    cache = copy_of(golden, tmp_path)
    a, b = executables(cache)[:2]
    b.write_bytes(a.read_bytes())
    m = run(cache)["metrics"]
    assert m["disk_cache_corrupt"] == 1 and m["programs_compiled"] == 1
    parse(b)  # rewritten with its own key


def test_intact_entry_that_does_not_load_is_replaced(golden, tmp_path):
    # A well-formed entry whose payload is not an executable: the plugin refuses it, the
    # program is compiled, and since this platform does reload its own executables (probed on the
    # first write) the cache stays on and the entry is overwritten.
    cache = copy_of(golden, tmp_path)
    victim = next(cache / name for name in golden[1]["written"]["add"]
                  if not is_recipe(cache / name))
    key = victim.stem.encode()
    junk = b"this is not a serialized executable" * 10
    header = MAGIC + struct.pack("<II", FORMAT_VERSION, len(key)) + key
    victim.write_bytes(header + struct.pack("<Q", len(junk)) + hashlib.sha256(junk).digest() + junk)

    r = run(cache, ["add", "mul"])
    m = r["metrics"]
    assert m["disk_cache_load_failures"] == 1
    assert m["programs_compiled"] == 1 and m["disk_cache_writes"] == 1
    assert "cannot reload" not in r["stderr"]
    assert r["cache_dir"] == str(cache)
    parse(victim)
    m = run(cache, ["add", "mul"])["metrics"]
    assert m["programs_compiled"] == 0 and m["disk_cache_load_failures"] == 0


def test_entry_the_plugin_cannot_parse_is_reported_in_one_line(golden, tmp_path):
    # A well-formed entry whose executable is damaged inside (invalid UTF-8 in a proto string):
    # the plugin logs parse errors of its own ("E0000 ... wire_format_lite.cc] ..."); torchtpu
    # says so in one line of its own instead, compiles the program and replaces the entry.
    cache = copy_of(golden, tmp_path)
    # The executable, not its recipe (which of the two names sorts first depends on the build).
    victim = next(cache / name for name in golden[1]["written"]["add"]
                  if not is_recipe(cache / name))
    payload = bytearray(parse(victim))
    payload[40] ^= 0xFF
    key = victim.stem.encode()
    header = MAGIC + struct.pack("<II", FORMAT_VERSION, len(key)) + key
    victim.write_bytes(header + struct.pack("<Q", len(payload)) +
                       hashlib.sha256(bytes(payload)).digest() + bytes(payload))

    r = run(cache, ["add", "mul"])
    m = r["metrics"]
    assert m["disk_cache_load_failures"] == 1 and m["programs_compiled"] == 1
    ours = [line for line in r["stderr"].splitlines() if "did not load" in line]
    assert len(ours) == 1 and "aten::add" in ours[0] and "compiling it again" in ours[0], ours
    plugin_errors = [line for line in r["stderr"].splitlines() if line[:1] in "EF" and
                     line[1:5].isdigit()]
    assert plugin_errors == [], r["stderr"]
    parse(victim)
    assert run(cache, ["add", "mul"])["metrics"]["disk_cache_load_failures"] == 0


def test_concurrent_processes_on_an_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    procs = [start(cache, OPS) for _ in range(4)]
    results = [finish(p) for p in procs]  # each checks its results against CPU
    assert all(r["metrics"]["disk_cache_corrupt"] == 0 for r in results)
    assert len(executables(cache)) == len(recipes(cache)) == len(OPS)
    for path in entries(cache):
        parse(path)
    assert leftovers(cache) == []


def test_cache_off_neither_reads_nor_writes(golden, tmp_path):
    cache = copy_of(golden, tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    r = run(cache, OPS + ["sin"], TORCHTPU_CACHE="0")
    m = r["metrics"]
    assert r["cache_dir"] == ""
    assert m["programs_compiled"] == len(OPS) + 1
    assert m["disk_cache_hits"] == m["disk_cache_misses"] == m["disk_cache_writes"] == 0
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == before


def test_unwritable_cache_dir_is_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = run(blocker / "cache")
    assert r["metrics"]["programs_compiled"] == len(OPS)
    assert r["metrics"]["disk_cache_writes"] == 0
    assert r["stderr"].count("not writing the compilation cache") == 1


def test_size_bound_evicts_least_recently_used(tmp_path):
    old_ops, new_ops = ALL_OPS[:6], ALL_OPS[6:12]
    # Each op's entry name and size (names do not depend on the folder).
    probe = tmp_path / "probe"
    written = run(probe, old_ops + new_ops)["written"]
    # Each op's executable and recipe.
    name = {op: next(n for n in written[op] if not is_recipe(probe / n)) for op in written}
    recipe = {op: next(n for n in written[op] if is_recipe(probe / n)) for op in written}
    size = {op: (probe / name[op]).stat().st_size + (probe / recipe[op]).stat().st_size
            for op in name}
    kept_op = old_ops[0]
    # Room for the entries read again plus the new ones (eviction goes down to 90% of the
    # bound), and not for everything.
    bound = int((size[kept_op] + sum(size[op] for op in new_ops)) / 0.85)
    assert bound < sum(size.values())

    cache = tmp_path / "cache"
    cache.mkdir()
    now = time.time()
    for i, op in enumerate(old_ops):  # old entries, oldest first in op order
        for n in (name[op], recipe[op]):
            shutil.copy(probe / n, cache / n)
            os.utime(cache / n, (now - 1000 + i, now - 1000 + i))

    m = run(cache, [kept_op] + new_ops, TORCHTPU_CACHE_MAX_BYTES=bound)["metrics"]
    assert m["disk_cache_hits"] == 1 and m["disk_cache_writes"] == len(new_ops)
    assert m["disk_cache_evictions"] >= 1
    names = {p.name for p in entries(cache)}
    assert sum(p.stat().st_size for p in entries(cache)) <= bound
    # Reading an entry counts as use: it outlives the older entries that were not read.
    assert name[kept_op] in names
    assert all(name[op] in names for op in new_ops)
    assert name[old_ops[1]] not in names  # the least recently used went first
    assert len(names) < 2 * (len(old_ops) + len(new_ops))  # executables and recipes


def test_bound_with_unit_suffix_and_stale_tmp_cleanup(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = cache / ("0" * 64 + ".tmp.12345.deadbeef")
    stale.write_bytes(b"half an entry")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    fresh = cache / ("1" * 64 + ".tmp.12346.deadbeef")  # maybe still being written: kept
    fresh.write_bytes(b"being written")
    r = run(cache, ["add"], TORCHTPU_CACHE_MAX_BYTES="1G")
    assert r["metrics"]["disk_cache_writes"] == 1 and r["stderr"].count("ignoring") == 0
    assert not stale.exists() and fresh.exists()


def test_bad_size_bound_warns_and_keeps_working(tmp_path):
    r = run(tmp_path / "cache", ["add"], TORCHTPU_CACHE_MAX_BYTES="lots")
    assert "ignoring TORCHTPU_CACHE_MAX_BYTES=lots" in r["stderr"]
    assert r["metrics"]["disk_cache_writes"] == 1


COMPILED_CHILD = textwrap.dedent(
    """
    import json
    import torch, torch.nn as nn, torchtpu

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    x = torch.randn(3, 8)
    want = model(x)
    model.to("tpu")
    xt = x.to("tpu")
    compiled = torch.compile(model, backend="tpu")
    torchtpu.reset_metrics()
    with torch.no_grad():
        got = compiled(xt).cpu()
    m = torchtpu.metrics()
    m.pop("cpu_fallbacks_by_op")
    print(json.dumps({"ok": torch.allclose(got, want, rtol=1e-4, atol=1e-5), "metrics": m}))
    """
)


def test_compiled_graphs_share_the_cache(tmp_path):
    def run_compiled():
        proc = subprocess.run([sys.executable, "-c", COMPILED_CHILD], env=child_env(tmp_path),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["ok"]
        return result["metrics"]

    first = run_compiled()
    assert first["programs_compiled"] >= 1
    assert first["disk_cache_writes"] == first["programs_compiled"]
    second = run_compiled()
    assert second["programs_compiled"] == 0
    assert second["disk_cache_hits"] == first["programs_compiled"]


# A compiled train step (forward and backward graphs, SGD updates eagerly) against the CPU's.
COMPILED_TRAIN_CHILD = textwrap.dedent(
    """
    import json, sys
    import torch, torch.nn as nn, torchtpu

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    ref = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    ref.load_state_dict(model.state_dict())
    model.to("tpu")
    compiled = torch.compile(model, backend="tpu")

    def step(m, f, x, y):
        loss = torch.nn.functional.mse_loss(f(x), y)
        loss.backward()
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        return loss.detach()

    torchtpu.reset_metrics()
    ok = True
    for _ in range(2):
        got = step(model, compiled, x.to("tpu"), y.to("tpu")).cpu()
        want = step(ref, ref, x, y)
        ok &= torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        ok &= torch.allclose(p.cpu(), q, rtol=1e-4, atol=1e-5)
    m = torchtpu.metrics()
    m.pop("cpu_fallbacks_by_op")
    print(json.dumps({"ok": bool(ok), "metrics": m}))
    """
)


@pytest.mark.parametrize("aot_cache", [True, False], ids=["aot-cache", "traced-again"])
def test_warm_compiled_train_step_lowers_nothing(tmp_path, aot_cache):
    # A compiled graph's signature (its structure, typed inputs, platform, build) keys a recipe:
    # a warm process goes from the signature to the executable without lowering or printing any
    # module, whether AOTAutograd's cache hands it the graph or Dynamo and AOTAutograd trace it
    # again (a fresh PyTorch cache folder each process).
    def run_compiled(n):
        env = child_env(tmp_path / "cache")
        if not aot_cache:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / f"torch-{n}")
        proc = subprocess.run([sys.executable, "-c", COMPILED_TRAIN_CHILD], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["ok"], "compiled step differs from the CPU's"
        return result["metrics"]

    cold = run_compiled(0)
    assert cold["programs_compiled"] >= 2  # the forward and backward graphs at least
    assert cold["modules_lowered"] == cold["programs_compiled"] + cold["programs_shared"]
    assert cold["disk_cache_signature_writes"] == cold["modules_lowered"]
    warm = run_compiled(1)
    assert warm["programs_compiled"] == 0
    assert warm["modules_lowered"] == 0
    assert warm["disk_cache_signature_hits"] == cold["modules_lowered"]
    assert warm["disk_cache_signature_writes"] == 0 and warm["disk_cache_misses"] == 0


@pytest.mark.skipif(platform.machine() != "x86_64" or not os.path.exists("/proc/cpuinfo"),
                    reason="the feature names below are x86's, read from Linux's /proc/cpuinfo")
def test_cache_key_names_the_host_instruction_sets():
    # XLA:CPU compiles for the host's instruction sets; a cache directory shared with a machine
    # that lacks one (AVX-512 vs AVX2) must not hand it executables it cannot run.
    import torchtpu

    flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    kernel_name = {"sse4.2": "sse4_2", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16"}
    isa = torchtpu._C._host_isa().split()
    assert isa[0] == "x86_64"
    for feature in ("sse4.2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512dq",
                    "avx512bw", "avx512vl", "avx512cd", "avx512vnni", "avx512bf16"):
        assert (feature in isa) == (kernel_name.get(feature, feature) in flags), feature
