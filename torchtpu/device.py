"""torch.tpu: the device module, shaped like torch.cuda."""

from __future__ import annotations

from typing import Any

import torch

from . import _C

__all__ = [
    "is_available", "is_initialized", "init", "device_count", "current_device", "set_device",
    "device", "device_of", "synchronize", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "memory_stats",
    "empty_cache", "get_device_name", "default_generators",
]


def is_available() -> bool:
    """True when a PJRT plugin loaded and reports at least one device."""
    return _C._is_available()


def is_initialized() -> bool:
    return _C._is_initialized()


def init() -> None:
    """Initializes the runtime now; raises RuntimeError saying why if it cannot."""
    _C._init()


def _lazy_init() -> None:
    if not _C._is_initialized():
        _C._init()


def device_count() -> int:
    return _C._device_count()


def _index(d: Any) -> int:
    if d is None:
        return current_device()
    if isinstance(d, int):
        return d
    if isinstance(d, str):
        d = torch.device(d)
    if isinstance(d, torch.device):
        if d.type != "tpu":
            raise ValueError(f"expected a tpu device, got {d}")
        return current_device() if d.index is None else d.index
    raise TypeError(f"invalid device {d!r}")


def current_device() -> int:
    return _C._current_device()


def set_device(d: Any) -> None:
    index = _index(d)
    _lazy_init()
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"Invalid device index tpu:{index}: torchtpu has {count} device(s) "
            f"(valid indices 0..{count - 1})"
        )
    _C._set_device(index)


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, d: Any):
        self.idx = -1 if d is None else _index(d)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the tensor's device current."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else None)


def synchronize(d: Any = None) -> None:
    """Waits for all work launched on the device; raises if any of it failed."""
    _C._synchronize(-1 if d is None else _index(d))


def get_device_name(d: Any = None) -> str:
    _lazy_init()
    return f"{_C._platform()}:{_C._device_kind(_index(d))}"


class _Generators:
    def __getitem__(self, i: int) -> torch.Generator:
        return _C._default_generator(i)

    def __len__(self) -> int:
        return max(device_count(), 1)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _Generators()


def manual_seed(seed: int) -> None:
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators:
        g.manual_seed(int(seed))


def seed() -> None:
    default_generators[current_device()].seed()


def seed_all() -> None:
    s = default_generators[0].seed()
    for g in list(default_generators)[1:]:
        g.manual_seed(s)


def initial_seed() -> int:
    return default_generators[current_device()].initial_seed()


def get_rng_state(d: Any = "tpu") -> torch.Tensor:
    return default_generators[_index(d)].get_state()


def set_rng_state(state: torch.Tensor, d: Any = "tpu") -> None:
    default_generators[_index(d)].set_state(state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(states) -> None:
    for g, s in zip(default_generators, states):
        g.set_state(s)


def memory_allocated(d: Any = None) -> int:
    """Bytes held by live tpu tensors' device buffers on the device."""
    return _C._memory_allocated(_index(d))


def max_memory_allocated(d: Any = None) -> int:
    return _C._max_memory_allocated(_index(d))


def reset_peak_memory_stats(d: Any = None) -> None:
    _C._reset_peak_memory(_index(d))


def memory_stats(d: Any = None) -> dict[str, int]:
    index = _index(d)
    stats = {
        "allocated_bytes.all.current": memory_allocated(index),
        "allocated_bytes.all.peak": max_memory_allocated(index),
    }
    if _C._is_initialized():
        plugin = _C._device_memory_stats(index)
        if plugin["bytes_in_use"] >= 0:
            stats["device.bytes_in_use"] = plugin["bytes_in_use"]
            stats["device.bytes_limit"] = plugin["bytes_limit"]
    return stats


def empty_cache() -> None:
    """PJRT frees a buffer as soon as its last tensor dies; there is no cache to empty."""


def _is_in_bad_fork() -> bool:
    return False


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True
