"""Shared fixtures for the torchtpu Python tests.

Every test runs against the XLA CPU PJRT plugin here (4 devices, tpu:0..tpu:3) and compares
with CPU PyTorch. `torchtpu` is imported once per session by the autouse fixture below, so a
test module that forgets to import it still finds the `tpu` device registered.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

# Each run of the suite starts from an empty compilation cache of its own, shared by the run's
# subprocesses: recipes are keyed by the build, so a rerun of the same build would otherwise find
# every program and graph on disk in ~/.cache/torchtpu, and tests that count compiles would
# depend on what an earlier run left there. A TORCHTPU_CACHE_DIR the caller sets is kept. Set
# before torch is imported (torch's autoload of torchtpu may start the runtime).
if "TORCHTPU_CACHE_DIR" not in os.environ:
    _suite_cache = tempfile.mkdtemp(prefix="torchtpu-test-cache-")
    os.environ["TORCHTPU_CACHE_DIR"] = _suite_cache
    atexit.register(shutil.rmtree, _suite_cache, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

# The tests exercise multi-device code (tpu:1, cross-device copies, device maps), so they ask the
# XLA CPU plugin for 4 devices; torchtpu's default is 1. Set before the runtime starts (it reads
# the variable once), and inherited by the tests' subprocesses unless they set their own.
os.environ.setdefault("TORCHTPU_CPU_DEVICE_COUNT", "4")


@pytest.fixture(scope="session", autouse=True)
def torchtpu_module():
    """Imports torchtpu (registering the `tpu` device) and checks the runtime came up."""
    import torchtpu

    assert torch.tpu.is_available(), "the tpu device is unavailable: " + torchtpu._C._init_error()
    # Asking starts nothing (test_device_probe.py); the tests expect a started runtime.
    torch.tpu.init()
    yield torchtpu
    torch.tpu.synchronize()


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("TORCHTPU_PJRT_PLUGIN", "TORCHTPU_PLATFORM", "TORCHTPU_CPU_FALLBACK",
              "TPU_LAUNCH_BLOCKING", "TORCHTPU_LOG_COMPILES", "TORCHTPU_DUMP_MLIR"):
        env.pop(k, None)
    env.update(extra)
    return env


class PythonProcess:
    """A fresh interpreter running `code`; wait() returns its CompletedProcess (text output)."""

    def __init__(self, code: str, env: dict[str, str], timeout: float):
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=_clean_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.done = None

    def wait(self, check: bool = True) -> subprocess.CompletedProcess:
        if self.done is None:
            try:
                out, err = self.proc.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
                raise AssertionError(f"subprocess timed out\nstdout:\n{out}\nstderr:\n{err}")
            self.done = subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)
        if check:
            assert self.done.returncode == 0, (
                f"subprocess failed ({self.done.returncode})\nstdout:\n{self.done.stdout}\n"
                f"stderr:\n{self.done.stderr}"
            )
        return self.done


@pytest.fixture(scope="session")
def start_python():
    """start_python(code, **env) starts `code` in a fresh interpreter with the given environment
    variables set (torchtpu's own variables otherwise cleared) and returns a PythonProcess.
    Starting several before waiting on any runs them concurrently (importing torch dominates)."""
    started = []

    def start(code: str, timeout: float = 180, **env: str) -> PythonProcess:
        p = PythonProcess(code, env, timeout)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.communicate()


@pytest.fixture
def run_python(start_python):
    """run_python(code, check=True, **env): start_python(...).wait(check)."""

    def run(code: str, check: bool = True, timeout: float = 180, **env: str):
        return start_python(code, timeout=timeout, **env).wait(check)

    return run


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches reset before and after the test, so each test compiles its own graphs."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def new_graphs(before) -> dict:
    """Compiled tpu graphs (name -> graph_metrics entry) that are not among `before`'s names."""
    from torchtpu import _dynamo as tpu_dynamo

    return {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in before}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "allow_fallback(*ops): ops (e.g. 'aten::nonzero') the no_cpu_fallback fixture "
        "lets run through the CPU fallback in this test")


@pytest.fixture
def no_cpu_fallback(request):
    """Fails the test if an op ran through the CPU fallback during it (by torchtpu.metrics()'
    per-op counts), except the ops its allow_fallback marker names. A module that lowers every
    op it tests opts in with `pytestmark = pytest.mark.usefixtures("no_cpu_fallback")`."""
    from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

    allowed = {op for m in request.node.iter_markers("allow_fallback") for op in m.args}
    before = fallback_counts()
    yield
    grown = {k: v for k, v in new_fallbacks(before).items() if k not in allowed}
    assert not grown, f"ops ran through the CPU fallback: {grown}"


@pytest.fixture
def no_own_fallback(request):
    """Fails the test if one of its module's OWN_OPS (the ops the module's lowerings cover, by
    base name: "uniform" covers aten::uniform_) ran through the CPU fallback during it; other ops
    may. A module opts in with `pytestmark = pytest.mark.usefixtures("no_own_fallback")`."""
    from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

    before = fallback_counts()
    yield
    own = new_fallbacks(before, request.module.OWN_OPS)
    assert not own, f"natively lowered ops fell back to the CPU: {own}"


def assert_exactly_cpu(tpu_result, cpu_result):
    """A tpu result (a tensor, or a tuple/list of them) equals the CPU's exactly: dtypes, shapes,
    values, NaN positions."""
    if isinstance(cpu_result, (tuple, list)):
        assert len(tpu_result) == len(cpu_result)
        for a, b in zip(tpu_result, cpu_result):
            assert_exactly_cpu(a, b)
        return
    assert tpu_result.device.type == "tpu"
    torch.testing.assert_close(tpu_result.cpu(), cpu_result, equal_nan=True, rtol=0, atol=0)


def assert_same_error(fn, *cpu_args, **kwargs):
    """fn raises on tpu copies of `cpu_args` what it raises on the CPU (the exception type and
    the first line of its message), and nothing runs through the CPU fallback."""
    import re

    from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

    with pytest.raises(Exception) as cpu_err:
        fn(*cpu_args, **kwargs)
    dev_args = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    before = fallback_counts()
    with pytest.raises(cpu_err.type, match=re.escape(str(cpu_err.value).splitlines()[0])):
        fn(*dev_args, **kwargs)
    grown = new_fallbacks(before)
    assert not grown, f"ops ran through the CPU fallback: {grown}"


def check_forward_backward(fn, inputs, grad_args=(0,), **tol):
    """fn on tpu copies of the CPU `inputs` matches fn on the CPU (dtype, shape, values within
    `tol`, NaN equal to NaN when tol says equal_nan=True), and so do the gradients of the inputs
    at `grad_args` for one random cotangent; nothing runs through the CPU fallback."""
    from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

    before = fallback_counts()
    cpu = [x.detach().clone().requires_grad_(i in grad_args) for i, x in enumerate(inputs)]
    dev = [x.detach().to("tpu").requires_grad_(i in grad_args) for i, x in enumerate(inputs)]
    out_cpu, out_tpu = fn(*cpu), fn(*dev)
    assert out_tpu.dtype == out_cpu.dtype and out_tpu.shape == out_cpu.shape
    torch.testing.assert_close(out_tpu.cpu(), out_cpu, **tol)
    if grad_args:
        grad = torch.randn_like(out_cpu)
        out_cpu.backward(grad)
        out_tpu.backward(grad.to("tpu"))
        for i in grad_args:
            torch.testing.assert_close(dev[i].grad.cpu(), cpu[i].grad, **tol)
    grown = new_fallbacks(before)
    assert not grown, f"ops ran through the CPU fallback: {grown}"
