"""A restart skips more than the XLA compile: AOTAutograd's cache keeps our compiled graphs (as
lowering recipes), and torch.compile(...).aot_compile() saves a whole compiled function that a later
process loads without Dynamo tracing. Each scenario runs in fresh processes over a private cache."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

# torch.compile(...).aot_compile() is newer than torch 2.11 (docs/platforms.md, "Other torch versions").
needs_aot_compile = pytest.mark.skipif(
    not hasattr(torch.compile(lambda x: x), "aot_compile"),
    reason="this torch has no torch.compile(...).aot_compile()",
)
TRAIN_CHILD = textwrap.dedent(
    """
    import json
    import torch, torch.nn as nn, torchtpu
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    x = torch.randn(3, 8)
    ref = model(x).square().mean()
    ref.backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.to("tpu")
    compiled = torch.compile(model, backend="tpu")
    torchtpu.reset_metrics()
    loss = compiled(x.to("tpu")).square().mean()
    loss.backward()
    ok = torch.allclose(loss.cpu(), ref.detach(), rtol=1e-5, atol=1e-6) and all(
        torch.allclose(p.grad.cpu(), g, rtol=1e-4, atol=1e-5)
        for p, g in zip(model.parameters(), want))
    print(json.dumps({"ok": ok, "aot": dict(counters["aot_autograd"]),
                      "compiled": torchtpu.metrics()["programs_compiled"]}))
    """
)

PRECOMPILE_CHILD = textwrap.dedent(
    """
    import json, sys
    import torch, torchtpu

    def f(x, w, b):
        return torch.nn.functional.gelu(x @ w + b).softmax(-1)

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(8, 16, generator=g), torch.randn(16, 32, generator=g),
            torch.randn(32, generator=g)]
    targs = [a.to("tpu") for a in args]
    path = sys.argv[2]
    torchtpu.reset_metrics()
    if sys.argv[1] == "save":
        cf = torch.compile(f, fullgraph=True, backend="tpu").aot_compile((tuple(targs), {}))
        cf.save_compiled_function(path)
    else:
        with open(path, "rb") as fh:
            cf = torch.compiler.load_compiled_function(fh)
    got = cf(*targs).cpu()
    print(json.dumps({"ok": torch.allclose(got, f(*args), rtol=1e-5, atol=1e-6),
                      "compiled": torchtpu.metrics()["programs_compiled"]}))
    """
)


def child(code, cache_dir, *argv, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHTPU_CACHE")}
    env["TORCHTPU_CACHE_DIR"] = str(cache_dir)
    env["TORCHINDUCTOR_CACHE_DIR"] = f"{cache_dir}-torch"
    env.update(extra)
    proc = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"], result
    return result


def test_a_restart_reuses_aot_autograd_and_the_programs(tmp_path):
    first = child(TRAIN_CHILD, tmp_path / "cache")
    assert first["compiled"] >= 2  # forward and backward programs at least
    assert first["aot"].get("autograd_cache_saved", 0) == 1
    second = child(TRAIN_CHILD, tmp_path / "cache")
    assert second["aot"].get("autograd_cache_hit", 0) == 1
    assert second["compiled"] == 0


def test_cache_off_keeps_aot_autograd_uncached_too(tmp_path):
    for _ in range(2):
        result = child(TRAIN_CHILD, tmp_path / "cache", TORCHTPU_CACHE="0")
        assert result["aot"].get("autograd_cache_hit", 0) == 0
        assert result["aot"].get("autograd_cache_saved", 0) == 0
        assert result["compiled"] >= 2


@needs_aot_compile
def test_aot_compiled_function_loads_in_a_new_process(tmp_path):
    saved = tmp_path / "f.bin"
    first = child(PRECOMPILE_CHILD, tmp_path / "cache", "save", str(saved))
    assert first["compiled"] == 1
    assert saved.stat().st_size > 0
    second = child(PRECOMPILE_CHILD, tmp_path / "cache", "load", str(saved))
    assert second["compiled"] == 0


@needs_aot_compile
def test_an_aot_compiled_function_loads_even_without_the_program_cache(tmp_path):
    # The saved function holds the lowering recipe, not the executable: a process whose program
    # cache is empty recompiles the program and still computes the right result.
    saved = tmp_path / "f.bin"
    child(PRECOMPILE_CHILD, tmp_path / "cache", "save", str(saved))
    fresh = child(PRECOMPILE_CHILD, tmp_path / "other-cache", "load", str(saved))
    assert fresh["compiled"] == 1
