"""Environment variables are declared once (csrc/config/config.cpp): docs/debugging.md's table is
generated from the declarations, C++ reads torchtpu's variables only through csrc/config, the
Python package only through torchtpu/_config.py, and nothing reads a variable that is not
declared or declares one nothing reads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import env_table  # noqa: E402

OURS = r"(?:TORCHTPU|TPU|TORCH_TPU)_[A-Z0-9_]+"  # TORCH_TPU_DEFER_AND_FUSE: TorchTPU's own name
# A read of one of our variables by name, in C++ (config::flag("X", ...), std::getenv("X")) or
# Python (_config.flag("X", ...), os.environ.get("X"), os.getenv("X"), os.environ["X"]).
READ = re.compile(r"""(?:getenv|environ\.get|environ\[|config::\w+|_config\.\w+)\(?\s*["']("""
                  + OURS + r""")["']""")


def _declared() -> list[str]:
    return [name for name, _, _ in env_table.declarations()]


def _sources() -> list[Path]:
    return sorted(list((ROOT / "csrc").rglob("*.cpp")) + list((ROOT / "csrc").rglob("*.h"))
                  + list((ROOT / "torchtpu").rglob("*.py")))


def test_docs_env_table_is_generated_from_the_declarations():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env_table.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_extension_declares_what_the_table_shows():
    """The table is read from config.cpp's text; the compiled declarations must be the same."""
    from torchtpu import _C

    assert [tuple(v) for v in _C._config_variables()] == env_table.declarations()


def test_cpp_reads_variables_only_through_config():
    readers = []
    for path in _sources():
        if path.suffix == ".py" or path.parent.name == "config":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"getenv\(\s*\"" + OURS, line):
                readers.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not readers, "read these through config::flag/raw/positive_int:\n" + "\n".join(readers)


def test_python_reads_variables_only_through_config():
    readers = []
    for path in sorted((ROOT / "torchtpu").rglob("*.py")):
        if path.name == "_config.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""(?:environ\.get|environ\[|getenv)\(?\s*["']""" + OURS, line):
                readers.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not readers, "read these through torchtpu._config.flag/raw:\n" + "\n".join(readers)


def test_every_variable_read_is_declared_and_every_declared_one_is_read():
    read: dict[str, str] = {}
    for path in _sources():
        if path.parent.name == "config" and path.suffix != ".py":
            continue
        for name in READ.findall(path.read_text()):
            read.setdefault(name, str(path.relative_to(ROOT)))
    assert len(read) >= 10, f"the scan found only {sorted(read)}: its pattern is broken"
    declared = _declared()
    assert len(declared) == len(set(declared)), "a variable is declared twice"
    undeclared = {k: v for k, v in read.items() if k not in declared}
    assert not undeclared, f"read but not declared in csrc/config/config.cpp: {undeclared}"
    unread = [name for name in declared if name not in read]
    assert not unread, f"declared in csrc/config/config.cpp but read nowhere: {unread}"


@pytest.mark.parametrize("value, expected", [
    (None, True), ("", True), ("1", True), ("yes", True), ("0", False), ("false", False),
    ("OFF", False), ("No", False), (" 0", True),
])
def test_python_flag_follows_the_cpp_rules(monkeypatch, value, expected):
    from torchtpu import _config

    if value is None:
        monkeypatch.delenv("TORCHTPU_ROUTE_INDUCTOR", raising=False)
    else:
        monkeypatch.setenv("TORCHTPU_ROUTE_INDUCTOR", value)
    assert _config.flag("TORCHTPU_ROUTE_INDUCTOR", True) is expected


@pytest.mark.parametrize("value", ["abc", "-1", "0"])
def test_bad_cpu_device_count_names_the_variable(run_python, value):
    # Issue 15: these silently gave 0 devices and the error never named the variable.
    proc = run_python("import torch, torchtpu\ntorch.ones(2).to('tpu')\n", check=False,
                      TORCHTPU_CPU_DEVICE_COUNT=value)
    assert proc.returncode != 0
    assert f"TORCHTPU_CPU_DEVICE_COUNT='{value}' is not valid" in proc.stderr


def test_cache_dir_that_is_a_file_is_named_and_work_goes_on(run_python, tmp_path):
    # Issue 15: reported as "No such file or directory"; the cache is skipped, results unchanged.
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("")
    proc = run_python("import torch, torchtpu\nprint((torch.arange(3.).to('tpu') + 1).tolist())\n",
                      TORCHTPU_CACHE_DIR=str(not_a_dir), TORCHTPU_CACHE="1")
    assert "[1.0, 2.0, 3.0]" in proc.stdout
    assert f"cannot create {not_a_dir}: Not a directory" in proc.stderr


def test_gpu_client_options_from_the_environment(monkeypatch):
    """What the XLA GPU plugin's client is created with (its create options, as JAX names them):
    no preallocation unless asked (so PyTorch's own CUDA use and a second process fit), the memory
    fraction and allocator when given; bad values raise naming the variable. Checked through the
    mapping itself: no GPU plugin is installed here."""
    from torchtpu import _C

    cuda = "/env/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
    for name in ("TORCHTPU_GPU_PREALLOCATE", "TORCHTPU_GPU_MEMORY_FRACTION",
                 "TORCHTPU_GPU_ALLOCATOR"):
        monkeypatch.delenv(name, raising=False)
    assert _C._client_options(cuda) == {"preallocate": False}
    monkeypatch.setenv("TORCHTPU_GPU_PREALLOCATE", "1")
    monkeypatch.setenv("TORCHTPU_GPU_MEMORY_FRACTION", "0.5")
    monkeypatch.setenv("TORCHTPU_GPU_ALLOCATOR", "Cuda_Async")
    assert _C._client_options(cuda) == {"preallocate": True, "memory_fraction": 0.5,
                                        "allocator": "cuda_async"}
    # Other plugins get none of it.
    assert "preallocate" not in _C._client_options("/env/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so")
    assert "preallocate" not in _C._client_options("/env/libtpu/libtpu.so")
    for name, bad in (("TORCHTPU_GPU_MEMORY_FRACTION", "1.5"),
                      ("TORCHTPU_GPU_MEMORY_FRACTION", "half"),
                      ("TORCHTPU_GPU_ALLOCATOR", "malloc")):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=name):
            _C._client_options(cuda)
        monkeypatch.setenv(name, "0.5" if "FRACTION" in name else "bfc")
