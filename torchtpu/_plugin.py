"""Finding the PJRT plugin: TORCHTPU_PJRT_PLUGIN wins, then TORCHTPU_PLATFORM, then auto
(a TPU, then an NVIDIA GPU, then the XLA CPU plugin)."""

from __future__ import annotations

import glob
import importlib.util
import os

from . import _config

_PLATFORMS = ("tpu", "cuda", "cpu")


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _find_cpu() -> str | None:
    d = _package_dir("xla_plugins.xla_cpu_pjrt")
    if d and os.path.exists(os.path.join(d, "xla_cpu_pjrt.so")):
        return os.path.join(d, "xla_cpu_pjrt.so")
    return None


def _find_tpu() -> str | None:
    d = _package_dir("libtpu")
    if d and os.path.exists(os.path.join(d, "libtpu.so")):
        return os.path.join(d, "libtpu.so")
    return None


def _find_cuda() -> str | None:
    candidates = []
    for pkg in ("xla_plugins", "jax_plugins"):
        d = _package_dir(pkg)
        if d:
            candidates += glob.glob(os.path.join(d, "*cuda*", "*.so"))
            candidates += glob.glob(os.path.join(d, "*gpu*", "*.so"))
    candidates = [c for c in candidates if "plugin" in os.path.basename(c) or "pjrt" in c]
    return sorted(candidates)[0] if candidates else None


def _has_tpu() -> bool:
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _has_nvidia_gpu() -> bool:
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")


_FINDERS = {"tpu": _find_tpu, "cuda": _find_cuda, "cpu": _find_cpu}
# What to install for each platform: torchtpu's extras name the plugin wheels (pyproject.toml).
_WHEELS = {
    "tpu": "libtpu (pip install 'torchtpu[tpu]')",
    "cuda": "a CUDA PJRT plugin (pip install 'torchtpu[cuda]' for xla-cuda13-pjrt, or JAX's "
    "jax-cuda13-pjrt / jax-cuda12-pjrt)",
    "cpu": "the XLA CPU plugin (pip install 'torchtpu[cpu]' for xla-cpu-pjrt)",
}


def find_plugin() -> tuple[str, str]:
    """Returns (plugin_path, "") or ("", reason why none was found)."""
    explicit = _config.raw("TORCHTPU_PJRT_PLUGIN")
    if explicit:
        return explicit, ""
    platform = (_config.raw("TORCHTPU_PLATFORM") or "").strip().lower()
    if platform:
        if platform not in _PLATFORMS:
            return "", (
                f"TORCHTPU_PLATFORM={platform!r} is not one of {', '.join(_PLATFORMS)}"
            )
        path = _FINDERS[platform]()
        if path:
            return path, ""
        return "", (
            f"TORCHTPU_PLATFORM={platform} but no {platform} PJRT plugin is installed: "
            f"install {_WHEELS[platform]} or set TORCHTPU_PJRT_PLUGIN=/path/plugin.so"
        )
    if _has_tpu() and _find_tpu():
        return _find_tpu(), ""
    if _has_nvidia_gpu() and _find_cuda():
        return _find_cuda(), ""
    path = _find_cpu()
    if path:
        return path, ""
    return "", (
        "no PJRT plugin found: pip install 'torchtpu[cpu]' (XLA:CPU), 'torchtpu[tpu]' on a TPU VM "
        "or 'torchtpu[cuda]' on an NVIDIA GPU, or set TORCHTPU_PJRT_PLUGIN=/path/plugin.so"
    )
