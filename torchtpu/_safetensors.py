"""safetensors loads straight onto tpu: `load_file(path, device="tpu")`, `safe_open(..., device="tpu:1")`.

safetensors' Rust core parses the device string against a fixed list (cpu, cuda, mps, npu, xpu,
xla, hpu, ...) and raises `SafetensorError: device tpu is invalid` for any other PyTorch device.
Libraries pass their execution device through: Diffusers' group offloading to disk loads each
group with `load_file(path, device=onload_device)`, Accelerate's disk offload and
`load_checkpoint_in_model` open files with `device=`. So torchtpu wraps `safe_open` (which
`load_file` and `load_model` use): for a tpu device it opens the file on the CPU (memory-mapped,
as for any device) and moves each tensor it hands out to the tpu device; every other device goes
to safetensors untouched, with no wrapper.

The upstream change that makes this unnecessary: safetensors accepting any device string that
`torch.device` accepts for PyTorch (it already special-cases each accelerator by name).

TORCHTPU_PATCH_SAFETENSORS=0 leaves safetensors untouched.
"""

from __future__ import annotations


import torch

from . import _config, _post_import


def enabled() -> bool:
    return _config.flag("TORCHTPU_PATCH_SAFETENSORS", True)


def _tpu_device(device):
    """The tpu torch.device that `device` names, else None (ints mean CUDA in safetensors)."""
    if isinstance(device, torch.device):
        return device if device.type == "tpu" else None
    if isinstance(device, str) and (device == "tpu" or device.startswith("tpu:")):
        return torch.device(device)
    return None


class _SliceOnTpu:
    def __init__(self, inner, device):
        self._inner = inner
        self._device = device

    def __getitem__(self, index):
        return self._inner[index].to(self._device)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _OpenOnTpu:
    """A safe_open handle read on the CPU whose tensors come out on a tpu device."""

    def __init__(self, inner, device):
        self._inner = inner
        self._device = device

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def get_tensor(self, name):
        return self._inner.get_tensor(name).to(self._device)

    def get_tensors(self):
        return {k: v.to(self._device) for k, v in self._inner.get_tensors().items()}

    def get_slice(self, name):
        return _SliceOnTpu(self._inner.get_slice(name), self._device)

    def __iter__(self):
        return iter(self._inner.keys())

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _wrap(original):
    if getattr(original, "_torchtpu_wrapped", False):
        return original

    def safe_open(filename, framework, device="cpu", *args, **kwargs):
        target = _tpu_device(device)
        if target is None:
            return original(filename, framework, device, *args, **kwargs)
        if framework not in ("pt", "torch", "pytorch"):
            raise ValueError(f"safe_open: device {device!r} needs framework='pt', got {framework!r}")
        if target.index is None:
            target = torch.device("tpu", torch.tpu.current_device())
        return _OpenOnTpu(original(filename, framework, "cpu", *args, **kwargs), target)

    safe_open.__doc__ = original.__doc__
    safe_open._torchtpu_wrapped = True
    safe_open._torchtpu_original = original
    return safe_open


def _patch(module) -> None:
    if hasattr(module, "safe_open"):
        module.safe_open = _wrap(module.safe_open)


def install() -> None:
    if not enabled():
        return
    _post_import.after_import("safetensors", _patch)
    _post_import.after_import("safetensors.torch", _patch)
