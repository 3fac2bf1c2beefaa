"""torch.distributed on tpu tensors: the c10d backend "tpu" (also "tpu_dist").

    import torch.distributed as dist
    dist.init_process_group(backend="tpu")            # or "cpu:gloo,tpu:tpu", or no backend
    torch.tpu.set_device(torchtpu.distributed.local_device())

The backend is C++ (csrc/distributed/tpu_backend.h), so DDP, FSDP2, DTensor and the functional
collectives find it by device type like NCCL. Its transport is chosen per group when the group is
made (`transport(group)` says which and why): collectives inside XLA programs when the ranks'
devices are distinct devices of one PJRT world (today: thread ranks of one process,
torchtpu.testing.run_ranks_in_threads), else host staging: the tpu inputs are copied to host
memory, torch's own ProcessGroupGloo (made here over the group's store) runs the collective, and
the results are handed to the tpu tensors (on XLA:CPU they take the host buffers over, without a
copy) before the returned Work completes. CPU tensors given to it go to gloo as they are.
"""

from __future__ import annotations

import logging
import os

import torch

_log = logging.getLogger("torchtpu.distributed")

__all__ = ["BACKEND_NAMES", "local_device", "local_device_index", "transport"]

BACKEND_NAMES = ("tpu", "tpu_dist")


def local_device_index() -> int:
    """The tpu device index this process should use: ``LOCAL_RANK`` (set by torchrun, Ray Train
    and most launchers) when this process sees more devices than that, else 0 (one device per
    process chosen by hand, e.g. ``TORCHTPU_CPU_DEVICE_COUNT=1`` or ``TPU_VISIBLE_CHIPS``).
    With default settings under torchrun each process opens only its own device and numbers it
    ``tpu:LOCAL_RANK`` among ``LOCAL_WORLD_SIZE`` (docs/distributed.md), so this is LOCAL_RANK."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    count = torch.tpu.device_count()
    if count == 0:
        raise RuntimeError("torchtpu.distributed: no tpu device is available")
    if local_rank < count:
        return local_rank
    if count == 1:
        return 0
    raise RuntimeError(
        f"torchtpu.distributed: LOCAL_RANK={local_rank} but this process sees {count} tpu "
        f"devices; give each process one device (e.g. TORCHTPU_CPU_DEVICE_COUNT=1) or at least "
        f"LOCAL_RANK+1 devices"
    )


def local_device() -> torch.device:
    """``torch.device("tpu", local_device_index())``."""
    return torch.device("tpu", local_device_index())


def transport(group=None) -> tuple[str, str]:
    """Which transport the tpu backend of ``group`` (default: the world) uses, and why:
    ``("xla", ...)`` when its collectives run inside XLA programs (the ranks' devices are one PJRT
    world), ``("gloo", ...)`` when they stage through host memory and gloo."""
    import torch.distributed as dist

    from .. import _C

    group = group if group is not None else dist.group.WORLD
    return tuple(_C._tpu_backend_transport(group._get_backend(torch.device("tpu"))))


def _staging_stats(group=None) -> dict:
    """Totals of where the tpu backend's staged collectives in ``group`` (default: the world)
    spent their time so far: device->host copies, waiting for the host transport (gloo), and the
    copies back (nanoseconds and bytes). For benchmarks; the counters only grow."""
    import torch.distributed as dist

    from .. import _C

    group = group if group is not None else dist.group.WORLD
    return dict(_C._tpu_backend_staging_stats(group._get_backend(torch.device("tpu"))))


def _create_backend(dist_backend_opts, backend_options):
    """The creator torch.distributed calls for each new group on the "tpu" backend."""
    from torch.distributed import PrefixStore, ProcessGroupGloo

    from .. import _C

    store = dist_backend_opts.store
    rank = dist_backend_opts.group_rank
    size = dist_backend_opts.group_size
    timeout = dist_backend_opts.timeout
    if "LOCAL_RANK" in os.environ:
        torch.tpu.set_device(local_device_index())
    if size > 1 and dist_backend_opts.group_id in ("0", "default_pg"):
        # One PJRT world across processes (TPU/GPU with TORCHTPU_PJRT_WORLD=1): the client, made
        # at first use, exchanges its topology through the rendezvous store. Elsewhere (XLA:CPU,
        # switched off) nothing happens here and the groups stage through the host; the group's
        # log line below says why.
        joined, why = _C._pjrt_world_join(store, rank, size)
        if not joined:
            _log.debug("torchtpu.distributed: no multi-process PJRT world: %s", why)
    # The host transport gets a store prefix of its own: torch gives this backend the group's
    # "<device>/" prefix store, and a gloo backend for "cpu" in the same group may use the
    # neighbouring prefix.
    gloo = ProcessGroupGloo(PrefixStore("tpu_host/", store), rank, size, timeout)
    gloo.options.global_ranks_in_group = list(dist_backend_opts.global_ranks_in_group)
    gloo.options.group_name = dist_backend_opts.group_id
    # The ranks choose the group's transport together, over the group's store: collectives inside
    # XLA programs when their devices are one PJRT world, else staging through gloo.
    backend = _C._tpu_backend(gloo, rank, size, PrefixStore("tpu_transport/", store),
                              dist_backend_opts.group_id,
                              list(dist_backend_opts.global_ranks_in_group),
                              int(timeout.total_seconds() * 1000))
    kind, why = _C._tpu_backend_transport(backend)
    _log.info("torchtpu.distributed: group %r (rank %d of %d) on tpu:%d: %s", dist_backend_opts.group_id,
              rank, size, torch.tpu.current_device(),
              ("collectives inside XLA programs, " if kind == "xla" else "host staging over gloo: ")
              + why)
    return backend


def register() -> None:
    """Registers the backend names with torch.distributed (idempotent; import torchtpu does it)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    for name in BACKEND_NAMES:
        if name.upper() in dist.Backend._plugins:
            continue
        # A list: a bare string would be iterated by character. CPU is listed too, so that
        # `backend="tpu"` also serves CPU tensors (object collectives, barriers), as gloo does.
        dist.Backend.register_backend(name, _create_backend, extended_api=True,
                                      devices=["tpu", "cpu"])
