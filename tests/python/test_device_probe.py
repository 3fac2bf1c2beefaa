"""Asking whether tpu exists, and how many devices, does not open the device.

torch.accelerator.is_available() / current_accelerator() / device_count() and torch.tpu's
is_available() / device_count() answer without creating the PJRT client (which holds a TPU
host's chips, one process at a time, and most of a GPU's memory on XLA:GPU), so a process that
only asks (Accelerate's launcher, vLLM's parent process, a Ray driver) leaves the devices to
the processes it starts. The runtime starts at the first real use, and then answers itself.
Each case runs in a fresh interpreter, because this test session's runtime is already up.
"""

from __future__ import annotations

import os

import pytest

ASK = """
import torch, torchtpu
print("ACC_AVAILABLE", torch.accelerator.is_available())
print("ACCELERATOR", torch.accelerator.current_accelerator())
print("ACC_COUNT", torch.accelerator.device_count())
print("AVAILABLE", torch.tpu.is_available())
print("COUNT", torch.tpu.device_count())
print("GENERATORS", len(torch.tpu.default_generators))
print("INIT_AFTER_ASKING", torch.tpu.is_initialized(), torch.tpu._initialized)
"""

USE = ASK + """
x = torch.arange(6, dtype=torch.float32, device="tpu")
print("SUM", (x * 2).sum().item())
print("INIT_AFTER_USE", torch.tpu.is_initialized())
print("COUNT_AFTER_USE", torch.tpu.device_count(), torch.accelerator.device_count())
"""


def lines(proc) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def cpu_plugin_path() -> str:
    import xla_plugins.xla_cpu_pjrt as m

    return os.path.join(os.path.dirname(m.__file__), "xla_cpu_pjrt.so")


@pytest.fixture(scope="module")
def other_plugin(tmp_path_factory):
    """The XLA CPU plugin under a name torchtpu does not treat as the CPU plugin, so its count
    comes the way a TPU's or GPU's does: from the torchtpu/_device_probe child process. Without
    the cpu_device_count create option the plugin makes its default number of devices."""
    path = tmp_path_factory.mktemp("plugin") / "pjrt_plugin_other.so"
    path.symlink_to(cpu_plugin_path())
    return str(path)


@pytest.fixture(scope="module")
def procs(start_python, other_plugin):
    """Starts every subprocess of this module at once; the tests wait on their own."""
    return {
        "cpu3": start_python(USE, TORCHTPU_CPU_DEVICE_COUNT="3"),
        "other": start_python(USE, TORCHTPU_PJRT_PLUGIN=other_plugin),
        "bad_count": start_python(ASK, TORCHTPU_CPU_DEVICE_COUNT="abc"),
        "missing": start_python(ASK, TORCHTPU_PJRT_PLUGIN="/nonexistent.so"),
        "launcher": start_python(LAUNCHER, TORCHTPU_CPU_DEVICE_COUNT="2"),
        "launcher_other": start_python(LAUNCHER, TORCHTPU_PJRT_PLUGIN=other_plugin),
        "fork": start_python(FORK_AFTER_ASKING, TORCHTPU_PJRT_PLUGIN=other_plugin),
    }


def test_cpu_plugin_count_without_client(procs):
    out = lines(procs["cpu3"].wait())
    assert out["ACC_AVAILABLE"] == "True" and out["AVAILABLE"] == "True"
    assert out["ACCELERATOR"] == "tpu"
    assert out["ACC_COUNT"] == "3" and out["COUNT"] == "3" and out["GENERATORS"] == "3"
    assert out["INIT_AFTER_ASKING"] == "False False"
    assert out["SUM"] == "30.0"
    assert out["INIT_AFTER_USE"] == "True"
    assert out["COUNT_AFTER_USE"] == "3 3"


def test_other_plugin_counted_by_a_child_process(procs):
    out = lines(procs["other"].wait())
    assert out["AVAILABLE"] == "True" and out["ACCELERATOR"] == "tpu"
    assert out["INIT_AFTER_ASKING"] == "False False"
    count = int(out["COUNT"])
    assert count >= 1 and out["ACC_COUNT"] == str(count)
    # The runtime's own client, created at first use, agrees with the child's count.
    assert out["INIT_AFTER_USE"] == "True" and out["SUM"] == "30.0"
    assert out["COUNT_AFTER_USE"] == f"{count} {count}"


def test_device_probe_helper(other_plugin):
    """The helper prints its count, or the plugin's error, on one marked line."""
    import subprocess

    import torchtpu

    helper = os.path.join(os.path.dirname(torchtpu.__file__), "_device_probe")
    ok = subprocess.run([helper, other_plugin], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout.startswith("torchtpu-device-count ")
    bad = subprocess.run([helper, "/nonexistent.so"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert bad.stdout.strip() == "torchtpu-device-error PJRT plugin not found: /nonexistent.so"


@pytest.mark.parametrize("case", ["bad_count", "missing"])
def test_unavailable_answers_false_without_starting(procs, case):
    out = lines(procs[case].wait())
    assert out["ACC_AVAILABLE"] == "False" and out["AVAILABLE"] == "False"
    assert out["ACC_COUNT"] == "0" and out["COUNT"] == "0"
    assert out["INIT_AFTER_ASKING"] == "False False"


# `accelerate launch`'s shape: the launcher asks, then starts the ranks, which use the device
# while the launcher is still alive; the launcher never starts the runtime.
LAUNCHER = """
import subprocess, sys
import torch, torchtpu
assert torch.accelerator.current_accelerator().type == "tpu"
n = torch.tpu.device_count()
assert torch.accelerator.is_available() and n >= 1
RANK = '''
import sys, torch, torchtpu
x = torch.ones(4, device=f"tpu:{int(sys.argv[1])}")
print("RANK", sys.argv[1], x.sum().item(), torch.tpu.device_count(), flush=True)
'''
ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(i)], stdout=subprocess.PIPE, text=True)
         for i in range(min(n, 2))]
for r in ranks:
    out, _ = r.communicate(timeout=170)
    assert r.returncode == 0
    print(out.strip())
print("LAUNCHER_COUNT", n)
print("LAUNCHER_INITIALIZED", torch.tpu.is_initialized())
"""


@pytest.mark.parametrize("case", ["launcher", "launcher_other"])
def test_launcher_leaves_the_device_to_its_ranks(procs, case):
    proc = procs[case].wait()
    out = lines(proc)
    n = int(out["LAUNCHER_COUNT"])
    if case == "launcher":
        assert n == 2
    assert out["LAUNCHER_INITIALIZED"] == "False"
    ranks = [line.split() for line in proc.stdout.splitlines() if line.startswith("RANK")]
    assert sorted(r[1] for r in ranks) == [str(i) for i in range(min(n, 2))]
    assert all(r[2] == "4.0" and r[3] == str(n) for r in ranks)


# Asking before fork() leaves nothing the child cannot use: the runtime was never created, so
# the child starts its own (only a child forked after the parent started it is a bad fork).
FORK_AFTER_ASKING = """
import os
import torch, torchtpu
n = torch.tpu.device_count()
assert torch.tpu.is_available() and not torch.tpu.is_initialized()
pid = os.fork()
if pid == 0:
    ok = (not torch.tpu._is_in_bad_fork() and torch.tpu.device_count() == n
          and torch.ones(3, device="tpu").sum().item() == 3.0 and torch.tpu.is_initialized())
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
print("CHILD_STATUS", status)
print("PARENT_SUM", torch.ones(2, device="tpu").sum().item())
"""


def test_fork_after_asking(procs):
    out = lines(procs["fork"].wait())
    assert out["CHILD_STATUS"] == "0" and out["PARENT_SUM"] == "2.0"
