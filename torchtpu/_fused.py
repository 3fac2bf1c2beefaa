"""Eager modes: strict (one XLA program per op, the default) and fused (TorchTPU's
DEFER_AND_FUSE: ops record into a pending region per device that runs as ONE program when a
value is needed, at an op that cannot be recorded, a collective, mark_step(), a size limit or a
repeated op sequence). Compiled mode (torch.compile / torchtpu.compile_step) is the third.

    torchtpu.set_eager_mode("fused")        # or TORCH_TPU_DEFER_AND_FUSE=1 at startup
    with torchtpu.fused_eager():            # for a block
        loss = train_step(x, y)
    torchtpu.get_eager_mode()               # "strict" or "fused"
"""

from __future__ import annotations

import contextlib

from . import _C

_MODES = ("strict", "fused")


def get_eager_mode() -> str:
    """"fused" when ops on tpu tensors record into fused programs, else "strict"."""
    return "fused" if _C._fused_enabled() else "strict"


def set_eager_mode(mode: str) -> None:
    """Switches the process's eager mode. Leaving "fused" runs every pending region first."""
    if mode not in _MODES:
        raise ValueError(f"torchtpu: eager mode must be one of {_MODES}, got {mode!r}")
    _C._fused_set_enabled(mode == "fused")


@contextlib.contextmanager
def fused_eager():
    """Fused eager for the block; the previous mode (and pending work) after it."""
    previous = get_eager_mode()
    set_eager_mode("fused")
    try:
        yield
    finally:
        set_eager_mode(previous)


def mark_step(device=None) -> None:
    """Runs the pending fused region now (of `device`, else of the current device and those this
    thread recorded on): a cut at a place of the user's choosing, as torch_xla's mark_step. A
    no-op in strict mode. It does not wait for the device (torch.tpu.synchronize() does)."""
    if device is None:
        _C._fused_flush(-1)
        return
    import torch

    d = torch.device(device) if not isinstance(device, int) else torch.device("tpu", device)
    _C._fused_flush(d.index if d.index is not None else _C._current_device())
