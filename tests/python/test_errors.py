"""Errors users meet: mixing devices (PyTorch's own message, CPU 0-d tensors allowed like CUDA),
bad device indices (a clear error, the process stays usable), a missing or broken PJRT plugin
(import still works, is_available() is False, first use names the path), the CPU fallback
switch (TORCHTPU_CPU_FALLBACK=0 names the op; allowed: right results, counted) and
TPU_LAUNCH_BLOCKING=1. Environment variables are read once per process: those tests run in a
subprocess (the run_python fixture of conftest.py)."""

import ctypes.util
import os

import pytest
import torch
from torch.testing import assert_close

import torchtpu

SAME_DEVICE = "Expected all tensors to be on the same device"


# ------------------------------------------------------------------------------------------
# Mixing devices


@pytest.mark.parametrize(
    "name,fn",
    [
        ("add", lambda t, c: t + c),
        ("radd", lambda t, c: c + t),
        ("mul_", lambda t, c: t.mul_(c)),
        ("cpu_inplace_with_tpu", lambda t, c: c.mul_(t)),
        ("matmul", lambda t, c: t.view(3, 1) @ c.view(1, 3)),
        ("cat", lambda t, c: torch.cat([t, c])),
        ("where", lambda t, c: torch.where(t > 0, t, c)),
        ("out_on_cpu", lambda t, c: torch.add(t, t, out=c)),
        ("linear", lambda t, c: torch.nn.functional.linear(t, c.view(1, 3))),
    ],
)
def test_mixing_cpu_and_tpu_raises(name, fn):
    t = torch.ones(3, device="tpu")
    c = torch.ones(3)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(t, c)
    # Nothing was written and the device still works.
    assert_close(t.cpu(), torch.ones(3))
    assert_close(c, torch.ones(3))


def test_mixing_error_names_both_devices():
    with pytest.raises(RuntimeError) as info:
        torch.ones(3, device="tpu") + torch.ones(3)
    msg = str(info.value)
    assert "tpu:0" in msg and "cpu" in msg


def test_mixing_tpu_devices_raises():
    a = torch.ones(3, device="tpu:0")
    b = torch.ones(3, device="tpu:1")
    with pytest.raises(RuntimeError, match=SAME_DEVICE) as info:
        a + b
    assert "tpu:0" in str(info.value) and "tpu:1" in str(info.value)


def test_cpu_zero_dim_tensors_are_allowed():
    t = torch.arange(3.0, device="tpu")
    for s in (torch.tensor(2.0), torch.tensor(2), torch.tensor(True), torch.tensor(2.0, dtype=torch.float64)):
        got = t + s
        assert got.is_tpu
        assert got.dtype == (t.cpu() + s).dtype
        assert_close(got.cpu(), t.cpu() + s)
        assert_close((s * t).cpu(), s * t.cpu())
    h = torch.arange(3.0, device="tpu", dtype=torch.float16)
    assert (h * torch.tensor(2.5)).dtype == torch.float16  # a 0-d tensor does not promote
    t.mul_(torch.tensor(3.0))
    assert_close(t.cpu(), torch.arange(3.0) * 3)
    assert_close(torch.where(t > 2, t, torch.tensor(-1.0)).cpu(),
                 torch.where(t.cpu() > 2, t.cpu(), torch.tensor(-1.0)))


def test_bad_device_index():
    n = torch.tpu.device_count()
    current = torch.tpu.current_device()
    for make in (lambda: torch.empty(1, device=f"tpu:{n}"), lambda: torch.empty(1, device="tpu:99"),
                 lambda: torch.zeros(2, device="tpu:99"), lambda: torch.randn(2, device="tpu:99"),
                 lambda: torch.ones(2).to("tpu:99")):
        with pytest.raises(RuntimeError, match=r"(?i)invalid device.*tpu:\d+") as info:
            make()
        assert str(n) in str(info.value)  # says how many devices there are
    # The process is still usable and the current device did not move.
    assert torch.tpu.current_device() == current
    assert torch.ones(2, device="tpu").sum().item() == 2.0
    with pytest.raises(RuntimeError, match="Invalid device index"):
        with torch.tpu.device(99):
            pass
    assert torch.tpu.current_device() == current


BAD_INDEX_FIRST = """
import torch, torchtpu
try:
    torch.empty(1, device="tpu:99")  # the very first use of the device
except RuntimeError as e:
    print("ERROR", e)
print("CURRENT", torch.tpu.current_device())
print("SUM", torch.ones(3, device="tpu").sum().item())
"""


def test_bad_device_index_as_first_use(probes):
    proc = probes["launch_blocking"].wait()  # that probe starts with this check
    assert "ERROR" in proc.stdout and "tpu:99" in proc.stdout
    assert "CURRENT 0" in proc.stdout and "SUM 3.0" in proc.stdout


# ------------------------------------------------------------------------------------------
# Broken plugins

PLUGIN_PROBE = """
import torch, torchtpu
print("AVAILABLE", torch.tpu.is_available())
print("COUNT", torch.tpu.device_count())
print("CPU_OK", (torch.ones(2) + 1).sum().item())
for attempt in range(2):
    try:
        torch.ones(2, device="tpu")
        print("NO ERROR")
    except RuntimeError as e:
        print("ERROR", str(e).splitlines()[0])
try:
    torch.tpu.init()
except RuntimeError as e:
    print("INIT", str(e).splitlines()[0])
"""


def check_broken_plugin(proc, path):
    out = proc.stdout
    assert "AVAILABLE False" in out and "COUNT 0" in out and "CPU_OK 4.0" in out
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2 and "NO ERROR" not in out
    for line in errors + [line for line in out.splitlines() if line.startswith("INIT")]:
        assert path in line
    return errors[0]


def libm_path():
    libm = ctypes.util.find_library("m")
    assert libm
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib"):
        if os.path.exists(os.path.join(d, libm)):
            return os.path.join(d, libm)
    return libm  # a bare name: dlopen searches for it


def test_missing_plugin(probes):
    msg = check_broken_plugin(probes["missing_plugin"].wait(), "/nonexistent.so")
    assert "not found" in msg


def test_library_that_is_not_a_plugin(probes):
    msg = check_broken_plugin(probes["libm_plugin"].wait(), libm_path())
    assert "not a PJRT plugin" in msg


def test_plugin_selection(monkeypatch):
    """find_plugin(): TORCHTPU_PJRT_PLUGIN wins, then TORCHTPU_PLATFORM, then auto; a platform
    without its plugin says which wheel to install."""
    from torchtpu._plugin import find_plugin

    for k in ("TORCHTPU_PJRT_PLUGIN", "TORCHTPU_PLATFORM"):
        monkeypatch.delenv(k, raising=False)
    auto, err = find_plugin()
    assert auto.endswith(".so") and os.path.exists(auto) and err == ""
    monkeypatch.setenv("TORCHTPU_PLATFORM", "cpu")
    assert find_plugin() == (auto, "") or find_plugin()[0].endswith("xla_cpu_pjrt.so")
    monkeypatch.setenv("TORCHTPU_PLATFORM", "bogus")
    path, err = find_plugin()
    assert path == "" and "bogus" in err and "tpu, cuda, cpu" in err
    monkeypatch.setenv("TORCHTPU_PJRT_PLUGIN", "/some/plugin.so")
    assert find_plugin() == ("/some/plugin.so", "")


# ------------------------------------------------------------------------------------------
# CPU fallback


def _fallback_op():
    """An op without a lowering, found (not assumed) through the fallback counter."""
    x = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0])
    candidates = [
        ("aten::masked_select", lambda t: torch.masked_select(t, t > 0)),
        ("aten::linalg_cholesky_ex", lambda t: torch.linalg.cholesky(torch.diag(t.abs()))),
        ("aten::kthvalue", lambda t: torch.kthvalue(t, 2).values),
        # slices over 256 elements are not lowered
        ("aten::unique_dim", lambda t: torch.unique(t.reshape(-1, 1).repeat(1, 300), dim=0)),
    ]
    for name, fn in candidates:
        before = torchtpu.metrics()["cpu_fallbacks_by_op"]
        fn(x.to("tpu"))
        after = torchtpu.metrics()["cpu_fallbacks_by_op"]
        grown = [op for op in after if after[op] > before.get(op, 0)]
        if any(op.startswith(name) for op in grown):
            return name, fn, x
    pytest.fail("every candidate op is lowered now: add one that still falls back")


def test_fallback_computes_and_counts():
    name, fn, x = _fallback_op()
    m = torchtpu.metrics()
    before = m["cpu_fallbacks"]
    before_op = sum(n for op, n in m["cpu_fallbacks_by_op"].items() if op.startswith(name))
    got = fn(x.to("tpu"))
    assert got.is_tpu
    assert_close(got.cpu(), fn(x))
    m = torchtpu.metrics()
    assert m["cpu_fallbacks"] > before
    assert sum(n for op, n in m["cpu_fallbacks_by_op"].items() if op.startswith(name)) > before_op


FALLBACK_FORBIDDEN = """
import torch, torchtpu
x = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0], device="tpu")
calls = {
    "aten::masked_select": lambda: torch.masked_select(x, x > 0),
    "aten::linalg_cholesky_ex": lambda: torch.linalg.cholesky(torch.diag(x.abs())),
    "aten::kthvalue": lambda: torch.kthvalue(x, 2),
    "aten::unique_dim": lambda: torch.unique(x.reshape(-1, 1).repeat(1, 300), dim=0),
}
try:
    calls[NAME]()
    print("NO ERROR")
except NotImplementedError as e:
    print("NotImplementedError", str(e).splitlines()[0])
print("FALLBACKS", torchtpu.metrics()["cpu_fallbacks"])
print("STILL_OK", (x * 2).sum().item())
"""


def test_fallback_forbidden(probes):
    name = probes["fallback_op"]
    proc = probes["fallback_forbidden"].wait()
    line = next((l for l in proc.stdout.splitlines() if l.startswith("NotImplementedError")), "")
    assert name in line and "TORCHTPU_CPU_FALLBACK=0" in line, proc.stdout
    assert "FALLBACKS 0" in proc.stdout and "STILL_OK 6.0" in proc.stdout


LAUNCH_BLOCKING = BAD_INDEX_FIRST + """
from torch.testing import assert_close
c = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
t = c.to("tpu")
assert_close((t @ t + 1).relu().sum(0).cpu(), (c @ c + 1).relu().sum(0), rtol=1e-4, atol=1e-4)
v = t.t()[2:5]
v.mul_(2)
c.t()[2:5].mul_(2)
assert_close(t.cpu(), c)
assert_close(t.to("tpu:1").cpu(), c)
m = torchtpu.metrics()
assert m["host_syncs"] >= m["executions"], m  # every launch waited
print("OK")
"""


def test_launch_blocking(probes):
    assert "OK" in probes["launch_blocking"].wait().stdout


@pytest.fixture(scope="module")
def probes(start_python):
    """Starts every subprocess of this module at once; the tests wait on their own."""
    name, _, _ = _fallback_op()
    return {
        "fallback_op": name,
        "missing_plugin": start_python(PLUGIN_PROBE, TORCHTPU_PJRT_PLUGIN="/nonexistent.so"),
        "libm_plugin": start_python(PLUGIN_PROBE, TORCHTPU_PJRT_PLUGIN=libm_path()),
        "fallback_forbidden": start_python(FALLBACK_FORBIDDEN.replace("NAME", repr(name)),
                                           TORCHTPU_CPU_FALLBACK="0"),
        "launch_blocking": start_python(LAUNCH_BLOCKING, TPU_LAUNCH_BLOCKING="1"),
    }
