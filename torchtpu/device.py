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
    "memory_reserved", "max_memory_reserved", "mem_get_info", "get_device_properties",
    "empty_cache", "get_device_name", "default_generators",
    "Event", "Stream", "StreamContext", "current_stream", "default_stream", "set_stream", "stream",
]


def is_available() -> bool:
    """True when a PJRT plugin loads and has at least one device. Creates no PJRT client (which
    would hold the devices) until the runtime starts: see runtime::device_count."""
    return _C._is_available()


def is_initialized() -> bool:
    return _C._is_initialized()


def __getattr__(name: str):
    # torch.cuda's `_initialized` flag, read by torch.utils.checkpoint (and torch.random.fork_rng's
    # callers) to decide whether to save and restore the device's RNG state around a recomputed
    # forward: without it, checkpointed blocks that draw random numbers (dropout, injected noise)
    # drew new ones in the backward's recomputation, so gradients differed from the CPU's.
    if name == "_initialized":
        return _C._is_initialized()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def init() -> None:
    """Initializes the runtime now; raises RuntimeError saying why if it cannot."""
    _C._init()


def _lazy_init() -> None:
    if not _C._is_initialized():
        _C._init()


def device_count() -> int:
    """The number of tpu devices, without starting the runtime (like is_available)."""
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
    _C._set_device(_valid_index(d))


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


def mark_step(d: Any = None) -> None:
    """Fused eager: runs the device's pending region now (see torchtpu.mark_step)."""
    from ._fused import mark_step as _mark_step

    _mark_step(d)


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


def memory_reserved(d: Any = None) -> int:
    """Bytes reserved on the device. PJRT frees a buffer when its last tensor dies (no caching
    allocator), so this equals memory_allocated."""
    return memory_allocated(d)


def max_memory_reserved(d: Any = None) -> int:
    return max_memory_allocated(d)


# The keys frameworks read (TorchTitan's memory monitor, Lightning, Accelerate), present even
# before the runtime starts.
_STAT_KEYS = tuple(
    f"{kind}.all.{metric}"
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes")
    for metric in ("current", "peak", "allocated", "freed")
) + ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
     "num_device_free")


def memory_stats(d: Any = None) -> dict[str, int]:
    """torch.cuda.memory_stats()'s keys for the tpu device (``allocated_bytes.all.current``,
    ``.peak``, ``reserved_bytes.all.*``, ``num_alloc_retries``, ``num_ooms``, ...). Reserved and
    active equal allocated (no caching allocator; retries and OOM counts stay 0). Where the
    plugin reports them, ``device.bytes_in_use`` and ``device.bytes_limit`` add the plugin's own
    view of the device (including buffers PJRT holds for itself). Allocated bytes are the
    tensors' storages' own; ``bucketed_bytes.all.current`` and ``.peak`` count the device
    buffers holding them, which size buckets (TORCHTPU_SIZE_BUCKETS, on by default on XLA:CPU/GPU) pad, and
    ``padding_bytes.all.current`` the difference."""
    index = _index(d)
    stats: dict[str, int] = dict.fromkeys(_STAT_KEYS, 0)
    if _C._is_initialized():
        stats.update(torch.accelerator.memory_stats(index))
    stats["allocated_bytes.all.current"] = memory_allocated(index)
    stats["allocated_bytes.all.peak"] = max_memory_allocated(index)
    stats["bucketed_bytes.all.current"] = _C._buffer_memory_allocated(index)
    stats["bucketed_bytes.all.peak"] = _C._max_buffer_memory_allocated(index)
    stats["padding_bytes.all.current"] = (stats["bucketed_bytes.all.current"]
                                          - stats["allocated_bytes.all.current"])
    if _C._is_initialized():
        plugin = _C._device_memory_stats(index)
        if plugin["bytes_in_use"] >= 0:
            stats["device.bytes_in_use"] = plugin["bytes_in_use"]
            stats["device.bytes_limit"] = plugin["bytes_limit"]
    return stats


def _host_memory_info() -> tuple[int, int]:
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0]) * 1024
    return info["MemAvailable"], info["MemTotal"]


def mem_get_info(d: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device's memory, as torch.cuda.mem_get_info. The XLA CPU
    plugin's device memory is the host's, so there it is the host's available/total memory."""
    index = _valid_index(d)
    plugin = _C._device_memory_stats(index)
    if plugin["bytes_limit"] >= 0 and plugin["bytes_in_use"] >= 0:
        limit = plugin["bytes_limit"]
        return max(limit - plugin["bytes_in_use"], 0), limit
    if _C._platform() == "cpu":
        return _host_memory_info()
    raise NotImplementedError(
        f"torch.tpu.mem_get_info: the {_C._platform()} PJRT plugin does not report device memory")


class _TpuDeviceProperties:
    """What torch.tpu.get_device_properties returns: name, total_memory (bytes), platform
    (tpu/cuda/cpu), kind (the PJRT device kind) and index."""

    def __init__(self, index: int):
        self.index = index
        self.platform = _C._platform()
        self.kind = _C._device_kind(index)
        self.name = f"{self.platform}:{self.kind}"
        self.total_memory = mem_get_info(index)[1]

    def __repr__(self) -> str:
        return (f"_TpuDeviceProperties(name={self.name!r}, total_memory="
                f"{self.total_memory // (1024 * 1024)}MB, index={self.index})")


def get_device_properties(d: Any = None) -> _TpuDeviceProperties:
    return _TpuDeviceProperties(_valid_index(d))


def empty_cache() -> None:
    """PJRT frees a buffer as soon as its last tensor dies; there is no cache to empty."""


def _is_in_bad_fork() -> bool:
    """True in a process forked after its parent initialized tpu: using tpu there raises
    (use the 'spawn' start method instead), as torch.cuda does."""
    return _C._in_bad_fork()


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True


# Events and streams. PJRT runs a device's executions in one ordered queue of its own, so every
# stream of a tpu device maps to that queue: streams have distinct ids (set_stream and
# current_stream round-trip, `with stream:` nests) but order nothing beyond what the queue does,
# and work on two streams of one device never overlaps more than on one stream. Different
# devices are different queues and do run concurrently.


def _valid_index(d: Any) -> int:
    index = _index(d)
    _lazy_init()
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"Invalid device index tpu:{index}: torchtpu has {count} device(s) "
            f"(valid indices 0..{count - 1})"
        )
    return index


class _EventMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Event) and torch.device(obj.device).type == "tpu"


class Event(metaclass=_EventMeta):
    """An event on a tpu device, shaped like torch.cuda.Event: ``torch.tpu.Event(...)`` returns a
    plain ``torch.Event`` on tpu, and ``isinstance(e, torch.tpu.Event)`` holds for every tpu
    torch.Event. (torch.Event.elapsed_time accepts only exact torch.Event objects, so a subclass
    could not be timed against the events torch itself creates.)

    record() captures every execution launched on the device so far; query() is True once
    they have all finished (and for an event never recorded); synchronize() blocks the host
    until then and raises RuntimeError if one of them failed. Recording launches nothing.
    wait(stream) needs nothing on the event's own device (one ordered queue per device); on
    another device the host waits for the event.

    With enable_timing=True, elapsed_time(end) is the milliseconds between the moments the two
    events completed: when the last execution each captured finished, as seen by the host from
    PJRT's completion callback, or the record time when nothing was still running then. It
    measures device work plus host-side completion latency (microseconds), not on-device clock
    cycles. ``blocking`` is accepted for torch.cuda compatibility; synchronize always blocks.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> torch.Event:
        if interprocess:
            raise ValueError("torch.tpu.Event: interprocess events are not supported on tpu")
        return torch.Event(device=torch.device("tpu", current_device()),
                           enable_timing=bool(enable_timing), blocking=bool(blocking))


class Stream(torch.Stream):
    """A stream on a tpu device, shaped like torch.cuda.Stream.

    Every stream of a device is the device's single ordered PJRT queue (see above); `priority`
    is accepted and ignored. query() is True when all work launched on the device has
    finished; synchronize() waits for it and raises if any failed.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs:  # wrap an existing stream: stream_id=, device_index=, device_type=
            return super().__new__(cls, priority=priority, **kwargs)
        return super().__new__(cls, device=torch.device("tpu", _valid_index(device)),
                               priority=priority)

    def wait_event(self, event: torch.Event) -> None:
        """Makes later work on this stream wait for `event` (see torch.tpu.Event)."""
        super().wait_event(event)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Makes later work on this stream wait for the work launched so far on `stream`."""
        super().wait_stream(stream)

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        """Records `event` (a new event if None) on this stream and returns it."""
        return super().record_event(event)


def _as_tpu_stream(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: Any = None) -> Stream:
    """This thread's current stream on the device (default: the current device)."""
    return _as_tpu_stream(torch.accelerator.current_stream(_valid_index(device)))


def default_stream(device: Any = None) -> Stream:
    """The device's default stream (id 0, the stream current until set_stream changes it)."""
    s = torch.accelerator.current_stream(_valid_index(device))
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: torch.Stream | None) -> None:
    """Makes `stream` current on its device and its device current, as torch.cuda.set_stream.
    None does nothing."""
    if stream is None:
        return
    if torch.device(stream.device).type != "tpu":
        raise ValueError(f"torch.tpu.set_stream: expected a tpu stream, got {stream}")
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes `stream` current (and its device current) and restores both
    on exit; None does nothing. See torch.tpu.stream."""

    def __init__(self, stream: torch.Stream | None):
        if stream is not None and torch.device(stream.device).type != "tpu":
            raise ValueError(f"torch.tpu.stream: expected a tpu stream, got {stream}")
        self.stream = stream
        self._prev_device = -1
        self._prev_streams: list[torch.Stream] = []

    def __enter__(self):
        if self.stream is None:
            return self.stream
        self._prev_device = current_device()
        # Both devices' current streams change back on exit, as torch.cuda.StreamContext does.
        self._prev_streams = [torch.accelerator.current_stream(self._prev_device)]
        if self.stream.device_index != self._prev_device:
            self._prev_streams.append(torch.accelerator.current_stream(self.stream.device_index))
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        for s in reversed(self._prev_streams):
            torch.accelerator.set_stream(s)  # the previous device's stream last: it is current
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    """`with torch.tpu.stream(s):` runs the block with `s` as the current stream (and its device
    as the current device). Every stream of a device is the same ordered queue (see Stream)."""
    return StreamContext(stream)
