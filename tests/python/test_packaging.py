"""What the package says about itself and the torch it needs (issue 31): its version, the torch it
was compiled against, the pin in its metadata, one clear error under another torch minor version
(and `import torch` still working then), and a plugin-less install that imports and says what to
install. Runs against the source tree and, in scripts/test_wheel.sh, against the installed wheel."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import textwrap

import torch

import torchtpu
import torchtpu_autoload


def minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def test_version_and_the_torch_it_was_built_against():
    assert torchtpu.__version__ == importlib.metadata.version("torchtpu")
    assert minor(torchtpu.__torch_version__) == minor(torch.__version__)


def test_metadata_pins_the_torch_minor_version():
    requires = importlib.metadata.requires("torchtpu") or []
    assert f"torch=={minor(torchtpu.__torch_version__)}.*" in requires, requires
    extras = {r.split(";")[0].strip(): r.split("extra ==")[1].strip(' "')
              for r in requires if "extra ==" in r}
    assert extras.get("xla-cpu-pjrt") == "cpu" and extras.get("libtpu") == "tpu", extras
    assert extras.get("xla-cuda13-pjrt") == "cuda", extras
    entry = [e.value for e in importlib.metadata.entry_points(group="torch.backends")
             if e.name == "torchtpu"]
    assert entry == ["torchtpu_autoload:autoload"], entry


def run(code: str, env: dict[str, str], cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_another_torch_minor_version_is_one_clear_error(tmp_path):
    """A copy of this torchtpu whose build info names another torch: `import torchtpu` raises one
    ImportError naming both versions (before its extension loads), while `import torch`, which
    autoloads torchtpu, still works and only warns."""
    pkg = tmp_path / "torchtpu"
    shutil.copytree(os.path.dirname(torchtpu.__file__), pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "_device_probe"))
    shutil.copytree(os.path.dirname(torchtpu_autoload.__file__), tmp_path / "torchtpu_autoload",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "_build_info.py").write_text('TORCH_VERSION = "1.99.0"\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    # In tmp_path: `python -c` puts the working directory (a checkout has torchtpu/) first.
    explicit = run("import torch, torchtpu", env, cwd=tmp_path)
    assert explicit.returncode != 0
    assert "ImportError: torchtpu" in explicit.stderr, explicit.stderr
    assert "built against torch 1.99.0" in explicit.stderr, explicit.stderr
    assert f"torch {torch.__version__} is installed" in explicit.stderr, explicit.stderr
    assert "undefined symbol" not in explicit.stderr

    autoloaded = run("import torch; print('tpu' if hasattr(torch, 'tpu') else 'no tpu')", env,
                     cwd=tmp_path)
    assert autoloaded.returncode == 0, autoloaded.stderr
    assert autoloaded.stdout.strip() == "no tpu"
    assert "torchtpu was not loaded" in autoloaded.stderr
    assert "built against torch 1.99.0" in autoloaded.stderr


def test_without_a_plugin_torchtpu_imports_and_says_what_to_install():
    env = dict(os.environ, TORCHTPU_PLATFORM="tpu")  # no libtpu here
    env.pop("TORCHTPU_PJRT_PLUGIN", None)
    r = run("""
        import torch, torchtpu
        print(torch.tpu.is_available())
        try:
            torch.ones(1, device="tpu")
        except RuntimeError as e:
            print("error:", e)
        """, env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "False"
    assert lines[1].startswith("error:") and "pip install 'torchtpu[tpu]'" in lines[1], lines
