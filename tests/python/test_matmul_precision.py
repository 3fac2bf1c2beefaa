"""torch.set_float32_matmul_precision on tpu: 'highest' / 'high' / 'medium' become StableHLO
precision_config HIGHEST / HIGH / DEFAULT on every f32 dot_general and convolution (the builder
adds it, so eager ops, fused regions and compiled graphs agree), and the setting is structure:
changing it recompiles once. XLA:CPU computes f32 products whatever the precision, so results
equal the CPU's float32 ones under every setting; TPU and XLA:GPU take bf16 passes / TF32 for
HIGH and DEFAULT (not observable here)."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import torchtpu

pytestmark = pytest.mark.usefixtures("no_cpu_fallback")

SETTINGS = {"highest": "HIGHEST", "high": "HIGH", "medium": "DEFAULT"}


@pytest.fixture(autouse=True)
def _restore():
    yield
    torch.set_float32_matmul_precision("highest")


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_results_equal_cpu_float32_under_every_setting(setting):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(33, 65, generator=g), torch.randn(65, 17, generator=g)
    x, w = torch.randn(2, 3, 9, 9, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    want_mm, want_conv = a @ b, F.conv2d(x, w, padding=1)  # CPU float32, 'highest'
    torch.set_float32_matmul_precision(setting)
    torch.testing.assert_close((a.to("tpu") @ b.to("tpu")).cpu(), want_mm)
    torch.testing.assert_close(F.conv2d(x.to("tpu"), w.to("tpu"), padding=1).cpu(), want_conv)


def test_changing_the_setting_recompiles_once_not_per_call():
    a, b = torch.randn(7, 5).to("tpu"), torch.randn(5, 3).to("tpu")
    (a @ b).cpu()
    for setting in ("high", "medium", "highest"):
        torch.set_float32_matmul_precision(setting)
        before = torchtpu.metrics()["cache_misses"]
        for _ in range(4):
            (a @ b).cpu()
        # One miss for the new setting, the first time (the last loop returns to a cached one).
        assert torchtpu.metrics()["cache_misses"] - before == (0 if setting == "highest" else 1)


def test_the_emitted_modules_carry_the_precision(run_python):
    r = run_python(
        """
        import sys, torch, torch.nn.functional as F
        import torchtpu
        a, b = torch.randn(6, 4).to("tpu"), torch.randn(4, 5).to("tpu")
        x, w = torch.randn(1, 2, 5, 5).to("tpu"), torch.randn(3, 2, 3, 3).to("tpu")
        h = torch.randn(6, 4, dtype=torch.bfloat16).to("tpu")
        g = torch.compile(lambda p, q: torch.tanh(p @ q), backend="tpu")
        for setting in ("highest", "high", "medium"):
            torch.set_float32_matmul_precision(setting)
            print("== " + setting, file=sys.stderr, flush=True)
            for _ in range(3):
                (a @ b).cpu(); F.conv2d(x, w).cpu(); g(a, b).cpu()
            (h @ h.t()).cpu()
        """,
        TORCHTPU_DUMP_MLIR="1", TORCHTPU_LOG_COMPILES="1", TORCHTPU_CACHE="0",
    )
    sections = re.split(r"^== (\w+)\n", r.stderr, flags=re.M)[1:]
    assert [s for s in sections[0::2]] == list(SETTINGS)
    for setting, text in zip(sections[0::2], sections[1::2]):
        modules = re.findall(r"^module @torchtpu \{\n.*?^\}\n", text, re.M | re.S)
        want = f"#stablehlo<precision {SETTINGS[setting]}>"
        products = [m for m in modules if re.search(r"stablehlo\.(dot_general|convolution)", m)]
        f32 = [m for m in products if "xbf16>" not in m]
        # eager mm, eager conv, the compiled graph: each compiled once per setting.
        assert len(f32) == 3, text[-3000:]
        for m in f32:
            assert f"precision_config = [{want}, {want}]" in m, m
            for other in set(SETTINGS.values()) - {SETTINGS[setting]}:
                assert f"precision {other}>" not in m, m
        for m in products:
            if "xbf16>" in m:  # a bf16 product: torch's f32 setting does not apply
                assert "precision_config" not in m, m


def test_a_fused_region_is_cut_where_the_setting_changes(run_python):
    # Deferred ops record under the setting of their call: a change cuts the region, so the ops
    # before it keep their precision (each fused program is built under one setting).
    r = run_python(
        """
        import torch, torchtpu
        a, b = torch.randn(6, 4), torch.randn(4, 5)
        ta, tb = a.to("tpu"), b.to("tpu")
        torch.tpu.synchronize()
        x = (ta @ tb).relu()
        torch.set_float32_matmul_precision("medium")
        y = (ta @ tb).tanh()
        torch.testing.assert_close(x.cpu(), (a @ b).relu())
        torch.testing.assert_close(y.cpu(), (a @ b).tanh())
        """,
        TORCH_TPU_DEFER_AND_FUSE="1", TORCHTPU_DUMP_MLIR="1", TORCHTPU_CACHE="0",
    )
    modules = re.findall(r"^module @torchtpu \{\n.*?^\}\n", r.stderr, re.M | re.S)
    products = [m for m in modules if "stablehlo.dot_general" in m]
    highest = [m for m in products if "precision HIGHEST" in m]
    default = [m for m in products if "precision DEFAULT" in m]
    assert highest and default, r.stderr[-3000:]
    assert not [m for m in products if "precision HIGHEST" in m and "precision DEFAULT" in m]
    # mm + relu before the change, mm + tanh after: one fused program each.
    assert all("stablehlo.tanh" not in m for m in highest), highest
    assert all("stablehlo.tanh" in m for m in default), default
