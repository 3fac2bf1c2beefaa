"""Ranks as threads of one process, each on its own tpu device: distributed code tested on one
machine without launching processes.

    import torch, torch.distributed as dist, torchtpu.testing

    def step(rank):
        t = torch.full((4,), float(rank), device="tpu")
        dist.all_reduce(t)                      # one XLA program, run by the 4 ranks' devices
        return t.cpu()

    results = torchtpu.testing.run_ranks_in_threads(step, 4)   # [rank 0's, ..., rank 3's]

Each thread gets its own default process group (torch's own thread-rank support: a thread-local
`torch.distributed` world and thread-isolated group registry, as torch's multi-threaded test
process groups use), on the tpu backend, with `tpu:rank` as its current device. Ranks of one
process on distinct devices of one PJRT client are one PJRT world, so the tpu backend runs their
collectives inside XLA programs (XLA's in-process collectives; on XLA:CPU set
TORCHTPU_CPU_DEVICE_COUNT to at least the number of ranks).
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from typing import Any, Callable

import torch

__all__ = ["run_ranks_in_threads"]

# One thread-rank run at a time: the thread-local world replaces torch.distributed's global one
# for as long as it lasts.
_lock = threading.Lock()


@contextlib.contextmanager
def _thread_local_world():
    import torch.distributed as dist
    from torch.testing._internal.distributed.multi_threaded_pg import ThreadLocalWorld

    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    c10d = dist.distributed_c10d
    old_world = c10d._world
    c10d._world = ThreadLocalWorld()
    # Group names resolve per thread (functional collectives look groups up by name).
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    # DTensor's sharding propagation runs ops on fake tensors under one fake mode at a time, as
    # torch's own thread-rank DTensor tests arrange.
    old_lock = ShardingPropagator._fake_mode_lock
    ShardingPropagator._fake_mode_lock = threading.Lock()
    try:
        yield
    finally:
        ShardingPropagator._fake_mode_lock = old_lock
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
        c10d._world = old_world


def run_ranks_in_threads(fn: Callable[[int], Any], world_size: int, *,
                         backend: str = "tpu",
                         timeout: datetime.timedelta = datetime.timedelta(seconds=120),
                         devices: list[int] | None = None) -> list:
    """Runs ``fn(rank)`` on ``world_size`` threads, each the rank of a default process group
    (``backend``, over one in-memory store) with ``tpu:rank`` (or ``tpu:devices[rank]``) as its
    current device; returns the results in rank order. Re-raises the first failure (noting its
    rank) once every thread has ended; the others then end within ``timeout``, the groups'
    timeout, at most."""
    import torch.distributed as dist

    if world_size < 1:
        raise ValueError(f"run_ranks_in_threads: world_size must be positive, got {world_size}")
    devices = list(range(world_size)) if devices is None else list(devices)
    if len(devices) != world_size:
        raise ValueError(f"run_ranks_in_threads: {len(devices)} devices for {world_size} ranks")
    count = torch.tpu.device_count()
    if count <= max(devices):
        raise ValueError(
            f"run_ranks_in_threads: {world_size} ranks need {world_size} tpu devices, this process "
            f"has {count} (XLA:CPU: set TORCHTPU_CPU_DEVICE_COUNT={world_size} before the device "
            f"is first used)")
    results: list = [None] * world_size
    failures: list[tuple[int, BaseException]] = []
    failures_lock = threading.Lock()
    store = dist.HashStore()

    def rank_main(rank: int) -> None:
        try:
            # Backward on this thread, not on autograd's per-device threads (a thread-local
            # switch): each rank's autograd hooks (DDP's, FSDP's) issue its collectives from the
            # rank's own thread.
            torch.autograd.set_multithreading_enabled(False)  # takes effect when made
            torch.tpu.set_device(devices[rank])
            # FakeTensorMode's dispatch cache keys a factory call by its device argument, not by
            # the device "tpu" means on this thread (its current device): DTensor's sharding
            # propagation on one rank got another rank's fake tensors. Torch's config is
            # per-thread.
            torch._dynamo.config.fake_tensor_cache_enabled = False
            # No device_id: a group bound to a tpu device makes torch ask every later group,
            # gloo ones included, for a tpu backend (new_group(backend="gloo") then fails).
            dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                    timeout=timeout)
            try:
                results[rank] = fn(rank)
            finally:
                dist.destroy_process_group()
        except BaseException as e:  # re-raised by the caller
            with failures_lock:
                failures.append((rank, e))

    with _lock, _thread_local_world():
        threads = [threading.Thread(target=rank_main, args=(r,), name=f"tpu-rank-{r}", daemon=True)
                   for r in range(world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if failures:
        rank, error = failures[0]
        error.add_note(f"(raised on thread rank {rank} of {world_size})")
        raise error
    return results
