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

__all__ = ["check_every_collective", "run_ranks_in_threads"]

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


def check_every_collective(rank: int, world_size: int, device: torch.device, reference) -> None:
    """Runs every collective the tpu backend serves on the default process group, on ``device``,
    and checks each result against the same collective on CPU tensors in ``reference`` (a gloo
    group of the same ranks): raises AssertionError naming the collective that differs. Call it
    on every rank at once: thread ranks (run_ranks_in_threads) or process ranks alike; the
    transport (in programs or host staging) is whatever the default group chose. Data are small
    integers, exact in every dtype and reduction order."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    W, dev, gloo, world = world_size, device, reference, dist.group.WORLD
    gen = torch.Generator().manual_seed(100 + rank)

    def data(*shape, dtype=torch.float32):
        return torch.randint(-4, 5, shape, generator=gen).to(dtype)

    def close(actual, expected, what):
        assert actual.device.type == "tpu", f"{what}: result on {actual.device}"
        torch.testing.assert_close(actual.cpu(), expected, msg=lambda m: f"{what}: {m}")

    def same(what, fn, x):
        """fn(tensor) in place on a CPU copy over gloo and on a tpu copy over the default group."""
        ref = x.clone()
        fn(ref, gloo)
        t = x.to(dev)
        fn(t, None)
        close(t, ref, what)

    # all_reduce: every op and dtype gloo has; bitwise ops; AVG and PREMUL_SUM (gloo has neither:
    # against the sum), with a scalar and a tensor factor.
    ops = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
           "product": dist.ReduceOp.PRODUCT}
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64):
        for name, op in ops.items():
            same(f"all_reduce {name} {dtype}",
                 lambda t, g, op=op: dist.all_reduce(t, op=op, group=g), data(3, 5, dtype=dtype))
    for name, op in {"band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
                     "bxor": dist.ReduceOp.BXOR}.items():
        same(f"all_reduce {name}", lambda t, g, op=op: dist.all_reduce(t, op=op, group=g),
             torch.randint(0, 256, (7,), generator=gen, dtype=torch.int32))
    x = data(4, 3)
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    for op, expected, what in (
            (dist.ReduceOp.AVG, ref / W, "avg"),
            (dist._make_nccl_premul_sum(0.5), ref * 0.5, "premul_sum"),
            (dist._make_nccl_premul_sum(torch.tensor(0.25, device=dev)), ref * 0.25,
             "premul_sum, tensor factor")):
        t = x.to(dev)
        dist.all_reduce(t, op=op)
        close(t, expected, f"all_reduce {what}")
    # Bit for bit: a broadcast moves NaN, -0.0 and infinities unchanged.
    special = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"), 1.5]) * (rank + 1)
    t = special.to(dev)
    dist.broadcast(t, src=W - 1)
    assert torch.equal(t.cpu().view(torch.int32), (special / (rank + 1) * W).view(torch.int32))
    # Ordering without syncs: the input comes from device work launched just before, the result
    # feeds device work launched right after.
    x = data(16, 16)
    ref = (x * 3 + 1).clone()
    dist.all_reduce(ref, group=gloo)
    t = x.to(dev) * 3 + 1
    dist.all_reduce(t)
    close(t @ t, ref @ ref, "all_reduce between device ops")
    # Views, read and written in place (gloo itself reduces non-contiguous CPU views wrongly:
    # its reference runs on contiguous copies).
    base = data(4, 6)
    ref = base.clone()
    for index in (1, 2):
        col = ref[:, index].contiguous()
        dist.all_reduce(col, group=gloo)
        ref[:, index] = col
    t = base.to(dev)
    dist.all_reduce(t[:, 1])
    dist.all_reduce(t.t()[2])
    close(t, ref, "all_reduce of views")
    # async_op: Work.wait() and its future, which holds the results.
    x = data(5)
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    t = x.to(dev)
    work = dist.all_reduce(t, async_op=True)
    fut_val = work.get_future().wait()
    work.wait()
    assert work.is_completed() and work.is_success()
    close(t, ref, "async all_reduce")
    close(fut_val[0], ref, "async all_reduce future value")
    # all_reduce_coalesced
    xs = [data(3), data(2, 2)]
    refs = [x.clone() for x in xs]
    dist.all_reduce_coalesced(refs, group=gloo)
    ts = [x.to(dev) for x in xs]
    dist.all_reduce_coalesced(ts)
    for t, r in zip(ts, refs):
        close(t, r, "all_reduce_coalesced")
    # broadcast, reduce (the non-root's tensor stays as it was)
    same("broadcast", lambda t, g: dist.broadcast(t, src=1, group=g), data(2, 3))
    for op_name, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX)):
        x = data(4)
        ref = x.clone()
        dist.reduce(ref, dst=W - 1, op=op, group=gloo)
        t = x.to(dev)
        dist.reduce(t, dst=W - 1, op=op)
        close(t, ref if rank == W - 1 else x, f"reduce {op_name}")
    # all_gather (list), all_gather_into_tensor (flat and stacked outputs)
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        x = data(3, 2).to(dtype) if dtype != torch.bool else data(3, 2) > 0
        refs = [torch.empty_like(x) for _ in range(W)]
        dist.all_gather(refs, x, group=gloo)
        outs = [torch.empty(3, 2, dtype=dtype, device=dev) for _ in range(W)]
        dist.all_gather(outs, x.to(dev))
        for o, r in zip(outs, refs):
            close(o, r, f"all_gather {dtype}")
        flat_ref = torch.empty(W * 3, 2, dtype=dtype)
        dist.all_gather_into_tensor(flat_ref, x, group=gloo)
        for shape in ((W * 3, 2), (W, 3, 2)):
            out = torch.empty(*shape, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, x.to(dev))
            close(out, flat_ref.reshape(shape), f"all_gather_into_tensor {dtype} {shape}")
    # FSDP2's pattern: the input is this rank's slice of the output itself.
    out = torch.empty(W * 3, device=dev)
    out.narrow(0, rank * 3, 3).copy_(torch.arange(3.0) + 10 * rank)
    dist.all_gather_into_tensor(out, out.narrow(0, rank * 3, 3))
    close(out, torch.cat([torch.arange(3.0) + 10 * r for r in range(W)]), "all_gather in place")
    # reduce_scatter (list) and reduce_scatter_tensor (sum, avg, premul)
    xs = [data(2, 3) for _ in range(W)]
    ref = torch.empty(2, 3)
    dist.reduce_scatter(ref, [x.clone() for x in xs], group=gloo)
    out = torch.empty(2, 3, device=dev)
    dist.reduce_scatter(out, [x.to(dev) for x in xs])
    close(out, ref, "reduce_scatter")
    x = data(W * 4, 3)
    ref = torch.empty(4, 3)
    dist.reduce_scatter_tensor(ref, x, group=gloo)
    for op, scale in ((dist.ReduceOp.SUM, 1.0), (dist.ReduceOp.AVG, 1 / W),
                      (dist._make_nccl_premul_sum(2.0), 2.0)):
        out = torch.empty(4, 3, device=dev)
        dist.reduce_scatter_tensor(out, x.to(dev), op=op)
        close(out, ref * scale, f"reduce_scatter_tensor x{scale}")
    # all_to_all_single: even, and uneven splits (rank r sends (r + j) % 3 rows to rank j);
    # all_to_all (list)
    x = data(W * 2, 3)
    ref = torch.empty_like(x)
    dist.all_to_all_single(ref, x, group=gloo)
    out = torch.empty(W * 2, 3, device=dev)
    dist.all_to_all_single(out, x.to(dev))
    close(out, ref, "all_to_all_single")
    in_splits = [(rank + j) % 3 for j in range(W)]
    out_splits = [(j + rank) % 3 for j in range(W)]
    x = data(sum(in_splits), 3)
    ref = torch.empty(sum(out_splits), 3)
    dist.all_to_all_single(ref, x, out_splits, in_splits, group=gloo)
    out = torch.empty(sum(out_splits), 3, device=dev)
    dist.all_to_all_single(out, x.to(dev), out_splits, in_splits)
    close(out, ref, "all_to_all_single uneven")
    xs = [data(2) for _ in range(W)]
    refs = [torch.empty(2) for _ in range(W)]
    dist.all_to_all(refs, [x.clone() for x in xs], group=gloo)
    outs = [torch.empty(2, device=dev) for _ in range(W)]
    dist.all_to_all(outs, [x.to(dev) for x in xs])
    for o, r in zip(outs, refs):
        close(o, r, "all_to_all")
    # gather, scatter
    x = data(3)
    refs = [torch.empty(3) for _ in range(W)] if rank == 0 else None
    dist.gather(x, refs, dst=0, group=gloo)
    outs = [torch.empty(3, device=dev) for _ in range(W)] if rank == 0 else None
    dist.gather(x.to(dev), outs, dst=0)
    if rank == 0:
        for o, r in zip(outs, refs):
            close(o, r, "gather")
    xs = [data(2, 2) for _ in range(W)]
    ref = torch.empty(2, 2)
    dist.scatter(ref, xs if rank == 1 else None, src=1, group=gloo)
    out = torch.empty(2, 2, device=dev)
    dist.scatter(out, [x.to(dev) for x in xs] if rank == 1 else None, src=1)
    close(out, ref, "scatter")
    # send/recv between pairs (an odd last rank sits out), and a ring as one batch_isend_irecv
    # (listed send-first on every rank: it completes only because the batch runs in an order
    # every rank derives alike).
    x = torch.arange(6.0).reshape(2, 3) + 10 * rank
    pair = rank + 1 if rank % 2 == 0 else rank - 1
    if pair < W:
        got = torch.empty(2, 3, device=dev)
        if rank % 2 == 0:
            dist.send(x.to(dev), dst=pair)
            dist.recv(got, src=pair)
        else:
            dist.recv(got, src=pair)
            dist.send(x.to(dev), dst=pair)
        close(got, torch.arange(6.0).reshape(2, 3) + 10 * pair, "send/recv")
    nxt, prv = (rank + 1) % W, (rank - 1) % W
    got = torch.empty(2, 3, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x.to(dev), nxt),
                                   dist.P2POp(dist.irecv, got, prv)])
    # The backend coalesces, so the batch comes back as one Work that completes after all of it.
    assert world._get_backend(dev).supports_coalescing
    assert len(reqs) == 1, reqs
    for req in reqs:
        req.wait()
    close(got, torch.arange(6.0).reshape(2, 3) + 10 * prv, "batch_isend_irecv ring")
    # _coalescing_manager(device=tpu): a batch of collectives, one Work, waited once.
    a, b = data(3), data(W * 2)
    ref_a, ref_b = a.clone(), torch.empty(2)
    dist.all_reduce(ref_a, group=gloo)
    dist.reduce_scatter_tensor(ref_b, b, group=gloo)
    ta, ta2 = a.to(dev), a.to(dev) * 2
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.all_reduce(ta)
        dist.all_reduce(ta2)
    assert len(cm.works) == 1, cm.works
    cm.wait()
    close(ta, ref_a, "coalesced all_reduce")
    close(ta2, ref_a * 2, "coalesced all_reduce")
    tb = torch.empty(2, device=dev)
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.reduce_scatter_tensor(tb, b.to(dev))
    cm.wait()
    close(tb, ref_b, "coalesced reduce_scatter_tensor")
    # allgather_into_tensor_coalesced, a stacked (FSDP2/DTensor) output beside a flat one.
    xa, xb = data(3, 2), data(4)
    ref_a, ref_b = torch.empty(W * 3, 2), torch.empty(W * 4)
    dist.all_gather_into_tensor(ref_a, xa, group=gloo)
    dist.all_gather_into_tensor(ref_b, xb, group=gloo)
    ga, gb = torch.empty(W, 3, 2, device=dev), torch.empty(W * 4, device=dev)
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.all_gather_into_tensor(ga, xa.to(dev))
        dist.all_gather_into_tensor(gb, xb.to(dev))
    cm.wait()
    close(ga, ref_a.reshape(W, 3, 2), "coalesced all_gather_into_tensor, stacked")
    close(gb, ref_b, "coalesced all_gather_into_tensor, flat")
    xa, xb = data(4), data(2, 3)
    refs = [xa.clone(), xb.clone()]
    dist.broadcast(refs[0], src=0, group=gloo)
    dist.broadcast(refs[1], src=1, group=gloo)
    ta, tb = xa.to(dev), xb.to(dev)
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.broadcast(ta, src=0, async_op=True)
        dist.broadcast(tb, src=1, async_op=True)
    cm.wait()
    close(ta, refs[0], "coalesced broadcast from rank 0")
    close(tb, refs[1], "coalesced broadcast from rank 1")
    # The coalesced forms the frameworks call, through the functional collectives.
    xs = [data(4), data(2, 3)]
    refs = [x.clone() for x in xs]
    for r in refs:
        dist.all_reduce(r, group=gloo)
    outs = funcol.all_reduce_coalesced([x.to(dev) for x in xs], "sum", world)
    for o, r in zip(outs, refs):
        close(funcol.wait_tensor(o), r, "all_reduce_coalesced (functional)")
    outs = funcol.all_gather_into_tensor_coalesced([x.to(dev) for x in xs], world)
    for o, x in zip(outs, xs):
        ref = torch.empty(W * x.shape[0], *x.shape[1:])
        dist.all_gather_into_tensor(ref, x, group=gloo)
        close(funcol.wait_tensor(o), ref, "all_gather_into_tensor_coalesced")
    xs = [data(W * 2), data(W, 3)]
    outs = funcol.reduce_scatter_tensor_coalesced([x.to(dev) for x in xs], "sum", [0, 0], world)
    for o, x in zip(outs, xs):
        ref = torch.empty(x.shape[0] // W, *x.shape[1:])
        dist.reduce_scatter_tensor(ref, x.clone(), group=gloo)
        close(funcol.wait_tensor(o), ref, "reduce_scatter_tensor_coalesced")
    # A collective's write into its output is not an autograd mutation (gloo and NCCL leave the
    # version counter alone; selective activation checkpointing checks it on cached outputs).
    t, c = torch.ones(4, device=dev), torch.ones(4)
    dist.all_reduce(t)
    dist.all_reduce(c, group=gloo)
    out = funcol.wait_tensor(funcol.reduce_scatter_tensor(torch.ones(W, device=dev), "sum", 0,
                                                          world))
    assert (t._version, out._version) == (c._version, 0) == (0, 0), (t._version, out._version)
    # Objects and CPU tensors on the tpu group go through its host backend.
    objs = [None] * W
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(W)], objs
    c = torch.ones(3) * (rank + 1)
    dist.all_reduce(c)
    assert c.device.type == "cpu" and torch.equal(c, torch.full((3,), W * (W + 1) / 2)), c
    dist.barrier()
