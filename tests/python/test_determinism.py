"""torch.use_deterministic_algorithms(True) on tpu (runtime/determinism.h).

XLA:CPU programs are deterministic as compiled: the setting changes no program there, but it is
still structure (one byte of every signature key), counted (deterministic_programs), and on a
platform that needs it, XLA's deterministic-ops option is sent as a CompileOptionsProto
env_option_override. The GPU routes are exercised here through a test hook that plans as if the
platform were cuda: the XLA CPU plugin accepts the same option names (its XLA shares
DebugOptions), so the option really goes through a compile here; only its effect on GPU
kernels is not observable on this machine.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import torchtpu
from torchtpu import _C

pytestmark = pytest.mark.usefixtures("no_cpu_fallback")


@pytest.fixture(autouse=True)
def _restore():
    yield
    torch.use_deterministic_algorithms(False)
    _C._set_determinism_test_platform("")


def _index_add(dtype=torch.float32, n=4096, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(n, 8, generator=g).to(dtype)
    index = torch.randint(0, 16, (n,), generator=g)  # many duplicates: an accumulating scatter
    base = torch.zeros(16, 8, dtype=dtype)
    return base, index, src


def _run_index_add(base, index, src):
    return base.to("tpu").index_add_(0, index.to("tpu"), src.to("tpu")).cpu()


def _delta(before, key):
    return torchtpu.metrics()[key] - before[key]


def test_scatter_add_is_bitwise_repeatable_and_matches_cpu():
    torch.use_deterministic_algorithms(True)
    base, index, src = _index_add()
    want = base.clone().index_add_(0, index, src)
    runs = [_run_index_add(base, index, src) for _ in range(3)]
    for r in runs[1:]:
        assert torch.equal(r, runs[0])  # bitwise
    torch.testing.assert_close(runs[0], want, rtol=1e-5, atol=1e-5)
    x = torch.zeros(16).to("tpu").scatter_add_(0, index[:64].to("tpu"), src[:64, 0].to("tpu"))
    torch.testing.assert_close(x.cpu(), torch.zeros(16).scatter_add_(0, index[:64], src[:64, 0]))


def test_on_xla_cpu_the_flag_is_a_visible_no_op():
    assert _C._determinism_plan() == {"route": "native", "platform": "cpu", "option": ""}
    base, index, src = _index_add(n=64)
    _run_index_add(base, index, src)  # compiled without the setting
    before = torchtpu.metrics()
    torch.use_deterministic_algorithms(True)
    _run_index_add(base, index, src)
    # Rebuilt once under the setting (a new key), counted, and the same module and options:
    # the executable is shared, nothing is compiled, no XLA option is sent.
    assert _delta(before, "deterministic_programs") >= 1
    assert _delta(before, "deterministic_option_programs") == 0
    assert _delta(before, "programs_compiled") == 0
    assert _delta(before, "programs_shared") >= 1


def test_the_setting_is_part_of_the_program_key():
    base, index, src = _index_add(n=128)
    _run_index_add(base, index, src)
    _run_index_add(base, index, src)
    before = torchtpu.metrics()
    torch.use_deterministic_algorithms(True)
    _run_index_add(base, index, src)  # a miss: another key
    mid = torchtpu.metrics()
    assert mid["cache_misses"] > before["cache_misses"]
    for _ in range(3):
        _run_index_add(base, index, src)  # hits from now on, not a miss per call
    torch.use_deterministic_algorithms(False)
    _run_index_add(base, index, src)  # the first program is still cached
    assert torchtpu.metrics()["cache_misses"] == mid["cache_misses"]


def test_on_cuda_the_xla_option_is_sent_with_the_compile():
    _C._set_determinism_test_platform("cuda")
    plan = _C._determinism_plan()
    assert plan == {"route": "compile_option", "platform": "cuda",
                    "option": "xla_gpu_exclude_nondeterministic_ops"}
    base, index, src = _index_add(n=96, seed=1)
    want = base.clone().index_add_(0, index, src)
    _run_index_add(base, index, src)
    before = torchtpu.metrics()
    torch.use_deterministic_algorithms(True)
    got = _run_index_add(base, index, src)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # Same module text, other compile options: another executable (the in-memory and disk keys
    # both cover the options), compiled with the option by the plugin.
    assert _delta(before, "deterministic_option_programs") >= 1
    assert _delta(before, "programs_compiled") >= 1


def test_an_older_plugin_era_falls_back_to_the_older_name():
    _C._set_determinism_test_platform(
        "cuda", ["xla_torchtpu_no_such_option", "xla_gpu_deterministic_ops"])
    assert _C._determinism_plan()["option"] == "xla_gpu_deterministic_ops"


def test_without_an_accepted_option_accumulating_scatters_raise_as_on_cuda():
    _C._set_determinism_test_platform("cuda", ["xla_torchtpu_no_such_option"])
    assert _C._determinism_plan()["route"] == "unavailable"
    torch.use_deterministic_algorithms(True)
    base, index, src = _index_add(n=80, seed=2)
    with pytest.raises(RuntimeError, match="does not have a deterministic implementation"):
        _run_index_add(base, index, src)
    # Integer sums are exact in any order; ops without a scatter-add are not affected.
    ib, ii, isrc = _index_add(torch.int64, n=80, seed=2)
    assert torch.equal(_run_index_add(ib, ii, isrc), ib.clone().index_add_(0, ii, isrc))
    a = torch.randn(5)
    torch.testing.assert_close((a.to("tpu") * 2 + 1).cpu(), a * 2 + 1)
    # warn_only=True: torch's warning instead, and the op runs.
    torch.use_deterministic_algorithms(True, warn_only=True)
    base, index, src = _index_add(n=81, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _run_index_add(base, index, src)
    assert any("deterministic" in str(w.message) for w in caught)
    torch.testing.assert_close(got, base.clone().index_add_(0, index, src), rtol=1e-5, atol=1e-5)


def test_compiled_graphs_key_on_the_setting(run_python):
    r = run_python(
        """
        import torch, torchtpu
        def f(x, i, s):
            return x.index_add(0, i, s) * 2
        g = torch.compile(f, backend="tpu")
        x, i, s = torch.zeros(8, 4), torch.randint(0, 8, (32,)), torch.randn(32, 4)
        want = f(x, i, s)
        args = [t.to("tpu") for t in (x, i, s)]
        for det in (False, True, True, False):
            torch.use_deterministic_algorithms(det)
            torch.testing.assert_close(g(*args).cpu(), want, rtol=1e-5, atol=1e-5)
        print("deterministic_programs", torchtpu.metrics()["deterministic_programs"])
        """,
        TORCHTPU_LOG_COMPILES="1",
    )
    assert "deterministic_programs" in r.stdout
    assert int(r.stdout.split()[-1]) >= 1
    assert "deterministic as compiled" in r.stderr  # the no-op is logged once on XLA:CPU
