"""torch.distributed on tpu tensors: the "tpu" c10d backend across 2 processes.

Each test starts its ranks as fresh interpreters (one tpu device each, a FileStore in tmp_path,
gloo on the loopback interface) bounded by a timeout, and every rank checks its tpu results
against the same collective run by torch's gloo backend on CPU tensors, or against one CPU
process training on the whole batch. The rank functions live in this file (`_rank_*`).
"""

from __future__ import annotations

import datetime
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _start_ranks(start_python, scenario: str, tmp_path, world: int = 2, timeout: float = 150,
                 **env: str):
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import test_distributed as t; "
            f"t._rank_main({scenario!r})")
    return [
        start_python(code, timeout=timeout, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                     TORCHTPU_TEST_STORE=str(tmp_path / "store"), TORCHTPU_CPU_DEVICE_COUNT="1",
                     GLOO_SOCKET_IFNAME="lo", **env)
        for r in range(world)
    ]


def _run_ranks(start_python, scenario: str, tmp_path, world: int = 2, **kw):
    procs = _start_ranks(start_python, scenario, tmp_path, world, **kw)
    results = [p.wait() for p in procs]
    for r, res in enumerate(results):
        assert f"rank {r} ok" in res.stdout, res.stdout + res.stderr
    return results


# ---------------------------------------------------------------------------------------------
# Rank side (runs in the spawned interpreters).


def _init(backend: str = "tpu", timeout_s: float = 60, **kw):
    import torch.distributed as dist

    import torchtpu  # noqa: F401  (registers the backend)
    import torchtpu.distributed as tdist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.tpu.set_device(tdist.local_device())
    dist.init_process_group(backend, init_method="file://" + os.environ["TORCHTPU_TEST_STORE"],
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s), **kw)
    return rank, world


def _rank_main(scenario: str) -> None:
    import torch.distributed as dist

    globals()["_rank_" + scenario]()
    if dist.is_initialized():
        dist.destroy_process_group()
    print(f"rank {os.environ['RANK']} ok", flush=True)


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.device.type == "tpu", f"{what}: result on {actual.device}"
    torch.testing.assert_close(actual.cpu(), expected, msg=lambda m: f"{what}: {m}")


def _rank_collectives():
    import torch.distributed as dist

    rank, world = _init()
    gloo = dist.new_group(backend="gloo")
    dev = torch.device("tpu", torch.tpu.current_device())
    gen = torch.Generator().manual_seed(100 + rank)

    def data(*shape, dtype=torch.float32):
        if dtype.is_floating_point:
            return torch.randn(*shape, generator=gen).to(dtype)
        return torch.randint(-5, 6, shape, generator=gen, dtype=dtype)

    # all_reduce: every op and dtype gloo has, tpu result == gloo's on the same values.
    ops = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
           "product": dist.ReduceOp.PRODUCT}
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64):
        for name, op in ops.items():
            x = data(3, 5, dtype=dtype)
            ref = x.clone()
            dist.all_reduce(ref, op=op, group=gloo)
            t = x.to(dev)
            dist.all_reduce(t, op=op)
            _close(t, ref, f"all_reduce {name} {dtype}")
    # AVG and PREMUL_SUM (gloo has neither): against the sum gloo computes.
    x = data(4, 3)
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    t = x.to(dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    _close(t, ref / world, "all_reduce avg")
    t = x.to(dev)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    _close(t, ref * 0.5, "all_reduce premul_sum")

    # Ordering without syncs: the input comes from device work launched just before, the result
    # feeds device work launched right after.
    x = data(64, 64)
    ref = (x * 3 + 1).clone()
    dist.all_reduce(ref, group=gloo)
    t = x.to(dev) * 3 + 1
    dist.all_reduce(t)
    _close(t @ t, ref @ ref, "all_reduce between device ops")

    # Non-contiguous inputs: a column and a row of a transposed view, written through to the
    # base. (Gloo itself reduces non-contiguous CPU views wrongly: its reference runs on
    # contiguous copies.)
    base = data(4, 6)
    ref = base.clone()
    for index in (1, 2):
        col = ref[:, index].contiguous()
        dist.all_reduce(col, group=gloo)
        ref[:, index] = col
    t = base.to(dev)
    dist.all_reduce(t[:, 1])
    dist.all_reduce(t.t()[2])
    _close(t, ref, "all_reduce of views")

    # async_op: Work.wait() and Work.get_future().
    x = data(5)
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    t = x.to(dev)
    work = dist.all_reduce(t, async_op=True)
    fut_val = work.get_future().wait()
    work.wait()
    assert work.is_completed()
    _close(t, ref, "async all_reduce")
    _close(fut_val[0], ref, "async all_reduce future value")

    # broadcast
    x = data(2, 3)
    ref = x.clone()
    dist.broadcast(ref, src=1, group=gloo)
    t = x.to(dev)
    dist.broadcast(t, src=1)
    _close(t, ref, "broadcast")

    # all_gather (list) and all_gather_into_tensor (bf16 too)
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        x = data(3, 2, dtype=dtype)
        refs = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(refs, x, group=gloo)
        outs = [torch.empty(3, 2, dtype=dtype, device=dev) for _ in range(world)]
        dist.all_gather(outs, x.to(dev))
        for o, r in zip(outs, refs):
            _close(o, r, f"all_gather {dtype}")
        flat_ref = torch.empty(world * 3, 2, dtype=dtype)
        dist.all_gather_into_tensor(flat_ref, x, group=gloo)
        flat = torch.empty(world * 3, 2, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(flat, x.to(dev))
        _close(flat, flat_ref, f"all_gather_into_tensor {dtype}")

    # reduce_scatter (list) and reduce_scatter_tensor (sum, avg)
    xs = [data(2, 3) for _ in range(world)]
    ref = torch.empty(2, 3)
    dist.reduce_scatter(ref, [x.clone() for x in xs], group=gloo)
    out = torch.empty(2, 3, device=dev)
    dist.reduce_scatter(out, [x.to(dev) for x in xs])
    _close(out, ref, "reduce_scatter")
    x = data(world * 4, 3)
    ref = torch.empty(4, 3)
    dist.reduce_scatter_tensor(ref, x, group=gloo)
    out = torch.empty(4, 3, device=dev)
    dist.reduce_scatter_tensor(out, x.to(dev))
    _close(out, ref, "reduce_scatter_tensor")
    out = torch.empty(4, 3, device=dev)
    dist.reduce_scatter_tensor(out, x.to(dev), op=dist.ReduceOp.AVG)
    _close(out, ref / world, "reduce_scatter_tensor avg")

    # all_to_all_single: even, and uneven splits; all_to_all (list)
    x = data(world * 2, 3)
    ref = torch.empty_like(x)
    dist.all_to_all_single(ref, x, group=gloo)
    out = torch.empty(world * 2, 3, device=dev)
    dist.all_to_all_single(out, x.to(dev))
    _close(out, ref, "all_to_all_single")
    in_splits = [1, 3] if rank == 0 else [2, 2]   # rank r sends in_splits[j] rows to rank j
    out_splits = [1, 2] if rank == 0 else [3, 2]
    x = data(sum(in_splits), 3)
    ref = torch.empty(sum(out_splits), 3)
    dist.all_to_all_single(ref, x, out_splits, in_splits, group=gloo)
    out = torch.empty(sum(out_splits), 3, device=dev)
    dist.all_to_all_single(out, x.to(dev), out_splits, in_splits)
    _close(out, ref, "all_to_all_single uneven")
    xs = [data(2) for _ in range(world)]
    refs = [torch.empty(2) for _ in range(world)]
    dist.all_to_all(refs, [x.clone() for x in xs], group=gloo)
    outs = [torch.empty(2, device=dev) for _ in range(world)]
    dist.all_to_all(outs, [x.to(dev) for x in xs])
    for o, r in zip(outs, refs):
        _close(o, r, "all_to_all")

    # gather, scatter, reduce (the non-root's tensor stays as it was)
    x = data(3)
    refs = [torch.empty(3) for _ in range(world)] if rank == 0 else None
    dist.gather(x, refs, dst=0, group=gloo)
    outs = [torch.empty(3, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(x.to(dev), outs, dst=0)
    if rank == 0:
        for o, r in zip(outs, refs):
            _close(o, r, "gather")
    xs = [data(2, 2) for _ in range(world)]
    ref = torch.empty(2, 2)
    dist.scatter(ref, xs if rank == 1 else None, src=1, group=gloo)
    out = torch.empty(2, 2, device=dev)
    dist.scatter(out, [x.to(dev) for x in xs] if rank == 1 else None, src=1)
    _close(out, ref, "scatter")
    x = data(4)
    ref = x.clone()
    dist.reduce(ref, dst=0, group=gloo)
    t = x.to(dev)
    dist.reduce(t, dst=0)
    _close(t, ref if rank == 0 else x, "reduce")

    # send/recv, isend/irecv, batch_isend_irecv
    peer = 1 - rank
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * rank
    if rank == 0:
        dist.send(x.to(dev), dst=1)
        got = torch.empty(2, 3, device=dev)
        dist.recv(got, src=1)
    else:
        got = torch.empty(2, 3, device=dev)
        dist.recv(got, src=0)
        dist.send(x.to(dev), dst=0)
    _close(got, torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * peer, "send/recv")
    # A collective's write into its output is not an autograd mutation (gloo and NCCL leave the
    # version counter alone; selective activation checkpointing checks it on cached outputs).
    import torch.distributed._functional_collectives as funcol

    t, c = torch.ones(4, device=dev), torch.ones(4)
    dist.all_reduce(t)
    dist.all_reduce(c, group=gloo)
    out = funcol.wait_tensor(funcol.reduce_scatter_tensor(torch.ones(4, device=dev), "sum", 0,
                                                          dist.group.WORLD))
    assert (t._version, out._version) == (c._version, 0) == (0, 0), (t._version, out._version)
    got = torch.empty(2, 3, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x.to(dev), peer),
                                   dist.P2POp(dist.irecv, got, peer)])
    # The backend coalesces, so the batch comes back as one Work that completes after all of it.
    assert dist.group.WORLD._get_backend(dev).supports_coalescing
    assert len(reqs) == 1, reqs
    for req in reqs:
        req.wait()
    _close(got, torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * peer,
           "batch_isend_irecv")
    # _coalescing_manager(device=tpu) around different collectives, not waited one by one.
    xa, xb = data(4), data(2, 3)
    refs = [xa.clone(), xb.clone()]
    dist.broadcast(refs[0], src=0, group=gloo)
    dist.broadcast(refs[1], src=1, group=gloo)
    ta, tb = xa.to(dev), xb.to(dev)
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.broadcast(ta, src=0, async_op=True)
        dist.broadcast(tb, src=1, async_op=True)
    assert len(cm.works) == 1, cm.works
    cm.wait()
    _close(ta, refs[0], "coalesced broadcast from rank 0")
    _close(tb, refs[1], "coalesced broadcast from rank 1")

    # coalesced forms the frameworks call, through the functional collectives
    xs = [data(4), data(2, 3)]
    refs = [x.clone() for x in xs]
    for r in refs:
        dist.all_reduce(r, group=gloo)
    outs = funcol.all_reduce_coalesced([x.to(dev) for x in xs], "sum", dist.group.WORLD)
    for o, r in zip(outs, refs):
        _close(funcol.wait_tensor(o), r, "all_reduce_coalesced")
    outs = funcol.all_gather_into_tensor_coalesced([x.to(dev) for x in xs], dist.group.WORLD)
    for o, x in zip(outs, xs):
        ref = torch.empty(world * x.shape[0], *x.shape[1:])
        dist.all_gather_into_tensor(ref, x, group=gloo)
        _close(funcol.wait_tensor(o), ref, "all_gather_into_tensor_coalesced")
    xs = [data(world * 2), data(world, 3)]
    outs = funcol.reduce_scatter_tensor_coalesced([x.to(dev) for x in xs], "sum", [0, 0],
                                                  dist.group.WORLD)
    for o, x in zip(outs, xs):
        ref = torch.empty(x.shape[0] // world, *x.shape[1:])
        dist.reduce_scatter_tensor(ref, x.clone(), group=gloo)
        _close(funcol.wait_tensor(o), ref, "reduce_scatter_tensor_coalesced")

    # objects and CPU tensors on the tpu group go through its host backend
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(world)], objs
    c = torch.ones(3) * (rank + 1)
    dist.all_reduce(c)
    assert c.device.type == "cpu" and torch.equal(c, torch.full((3,), 3.0)), c
    dist.barrier()


def _rank_lent_staging():
    """Results large enough to use the backend's reused host buffers, which XLA:CPU tensors take
    over without a copy: no later collective may write into memory a tpu tensor still holds, in
    place updates (eager and compiled, which donates) must not disturb other tensors, and the
    results outlive the process group."""
    import torch.distributed as dist

    rank, world = _init()
    gloo = dist.new_group(backend="gloo")
    dev = torch.device("tpu", torch.tpu.current_device())
    gen = torch.Generator().manual_seed(7 + rank)
    n = 64 * 1024  # 256 KiB of float32: above the pool's minimum
    xs = [torch.randn(n, generator=gen) for _ in range(4)]
    refs = []
    for x in xs:
        r = x.clone()
        dist.all_reduce(r, group=gloo)
        refs.append(r)
    ts = []
    for x in xs:  # same sizes one after another: each must get memory no live tensor holds
        t = x.to(dev)
        dist.all_reduce(t)
        ts.append(t)
    for i, (t, r) in enumerate(zip(ts, refs)):
        _close(t, r, f"all_reduce result {i} after later collectives")

    # In-place updates of a result, eager and compiled (a compiled in-place step donates its
    # input buffer, so XLA writes into the memory the result took over); the others unchanged.
    ts[0].add_(1)
    step = torch.compile(lambda a: a.mul_(2), backend="tpu")
    step(ts[1])
    dist.all_reduce(ts[0])
    _close(ts[0], (refs[0] + 1) * world, "all_reduce of an updated result")
    _close(ts[1], refs[1] * 2, "compiled in-place update of a result")
    _close(ts[2], refs[2], "untouched result")

    # AVG (divides the host copy before the copy back), all_gather into a view of a larger
    # tensor (the copy back runs a program over the taken-over buffer), freed results.
    t = xs[3].to(dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    _close(t, refs[3] / world, "all_reduce avg")
    big = torch.zeros(world * n + 5, device=dev)
    dist.all_gather_into_tensor(big[5:], xs[2].to(dev))
    ref = torch.empty(world * n)
    dist.all_gather_into_tensor(ref, xs[2], group=gloo)
    _close(big, torch.cat([torch.zeros(5), ref]), "all_gather into a view")
    del ts[3]
    for i in range(3):
        t = xs[i].to(dev)
        dist.all_reduce(t)
        _close(t, refs[i], f"all_reduce {i} after results were freed")

    # Results outlive the group (the host memory belongs to the tensors, not to the backend).
    keep = ts[2]
    dist.destroy_process_group()
    garbage = [torch.full((n,), 123.0) for _ in range(8)]
    _close(keep, refs[2], "result after destroy_process_group")
    del garbage


def _rank_errors():
    import torch.distributed as dist

    rank, world = _init(timeout_s=20)
    dev = torch.device("tpu", torch.tpu.current_device())
    # Mixing devices in one collective names the problem, and the group stays usable.
    try:
        dist.all_gather([torch.empty(2) for _ in range(world)], torch.ones(2, device=dev))
    except RuntimeError as e:
        assert "both cpu and tpu" in str(e), e
    else:
        raise AssertionError("all_gather with cpu outputs and a tpu input did not raise")
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    _close(t, torch.full((2,), float(world)), "all_reduce after an error")
    # Coalescing calls out of order name the problem; an empty batch completes.
    pg = dist.group.WORLD
    pg._start_coalescing(dev)
    try:
        pg._start_coalescing(dev)
    except RuntimeError as e:
        assert "startCoalescing called twice" in str(e), e
    else:
        raise AssertionError("a second startCoalescing did not raise")
    pg._end_coalescing(dev).wait()
    try:
        pg._end_coalescing(dev)
    except RuntimeError as e:
        assert "without startCoalescing" in str(e), e
    else:
        raise AssertionError("endCoalescing without startCoalescing did not raise")
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    _close(t, torch.full((2,), float(world)), "all_reduce after coalescing errors")
    # Mismatched sizes across ranks: gloo reports it (or times out) instead of hanging.
    try:
        dist.all_reduce(torch.ones(4 + rank, device=dev))
    except RuntimeError as e:
        print("mismatch error:", str(e).splitlines()[0], flush=True)
    else:
        raise AssertionError("all_reduce of 4 vs 5 elements did not raise")


def _rank_init_forms():
    import torch.distributed as dist

    import torchtpu  # noqa: F401

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("tpu", 0)  # one device per process
    forms = [dict(backend="cpu:gloo,tpu:tpu", device_id=dev), dict(), dict(backend="tpu_dist"),
             dict(device_id=dev)]
    for i, kw in enumerate(forms):
        dist.init_process_group(init_method=f"file://{os.environ['TORCHTPU_TEST_STORE']}{i}",
                                rank=rank, world_size=world, **kw)
        t = torch.full((3,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        _close(t, torch.full((3,), 3.0), f"all_reduce after init_process_group({kw})")
        if "backend" in kw:  # without one, torch picks the accelerator's backend only (as NCCL)
            c = torch.full((3,), float(rank + 1))
            dist.all_reduce(c)
            assert torch.equal(c, torch.full((3,), 3.0)), (kw, c)
            expected = "gloo" if "cpu:gloo" in kw["backend"] else kw["backend"]
            backend = dist.group.WORLD._get_backend(torch.device("cpu"))
            assert backend.name() in (expected, "tpu"), (kw, backend.name())
        dist.destroy_process_group()


def _rank_compiled():
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import torchtpu._dynamo as tdynamo

    rank, world = _init()
    dev = torch.device("tpu", torch.tpu.current_device())

    def step(x, w):
        y = torch.relu(x @ w)
        y = funcol.all_reduce(y, "sum", dist.group.WORLD)
        z = funcol.all_gather_tensor(y * 2, 0, dist.group.WORLD)
        r = funcol.reduce_scatter_tensor(z + 1, "avg", 0, dist.group.WORLD)
        return r.sum(0), z

    compiled = torch.compile(step, backend="tpu")
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(9))
    for i in range(2):
        x = torch.randn(4, 4, generator=torch.Generator().manual_seed(10 * i + rank))
        expected = step(x, w)  # eager on CPU tensors: the group's host backend
        got = compiled(x.to(dev), w.to(dev))
        for g, e in zip(got, expected):
            _close(g, e, f"compiled step {i}")
    metrics = tdynamo.graph_metrics()
    # The compute between the collectives runs as compiled segments, each built once (compiled,
    # or found on disk by its recipe when the cache is warm: then 0 compiles) and run per step.
    compiled_segments = [m for m in metrics.values() if m.get("executions")]
    assert len(compiled_segments) >= 2, metrics
    assert all(m["compiles"] <= 1 and m["executions"] == 2 for m in compiled_segments), metrics
    assert not any("eager_reason" in m for m in metrics.values()), metrics


def _rank_mesh_2x2():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    rank, world = _init()
    dev = torch.device("tpu", torch.tpu.current_device())
    mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    # Each mesh dimension's group reduces over its own ranks only.
    for name, peers in (("dp", [tp, tp + 2]), ("tp", [2 * dp, 2 * dp + 1])):
        t = torch.full((2,), float(rank + 1), device=dev)
        dist.all_reduce(t, group=mesh.get_group(name))
        _close(t, torch.full((2,), float(sum(r + 1 for r in peers))), f"all_reduce over {name}")
    full = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    d = distribute_tensor(full.to(dev), mesh, [Shard(0), Shard(1)])
    assert d.to_local().shape == (2, 4)
    _close(d.full_tensor(), full, "2-D sharded DTensor")
    _close((d @ d.T).full_tensor(), full @ full.T, "2-D sharded DTensor matmul")
    # 2-D training: tensor parallel inside each dp pair, FSDP across them; each dp rank trains on
    # its half of the batch.
    model = parallelize_module(_mlp().to(dev), mesh["tp"], {"0": ColwiseParallel(),
                                                             "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(3):
        x, y = _global_batch(2, step)
        x, y = x.chunk(2)[dp], y.chunk(2)[dp]
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss = loss.detach().clone()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=mesh.get_group("dp"))
        losses.append(loss.item())
    _check_training(losses, [p.full_tensor() for p in model.parameters()], 2, 3, "FSDP x TP")


def _rank_dies():
    import torch.distributed as dist

    rank, world = _init(timeout_s=20)
    dev = torch.device("tpu", torch.tpu.current_device())
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    if rank == 1:
        os._exit(3)  # dies without a word to the others
    try:
        dist.all_reduce(torch.ones(2, device=dev))
        dist.all_reduce(torch.ones(2, device=dev))
    except RuntimeError as e:
        print("peer death error:", str(e).splitlines()[0], flush=True)
        print(f"rank {rank} ok", flush=True)
        os._exit(0)  # destroy_process_group would talk to the dead peer
    raise AssertionError("collectives with a dead peer did not raise")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _global_batch(world: int, step: int):
    g = torch.Generator().manual_seed(1000)  # one batch: the loss must fall
    return torch.randn(4 * world, 8, generator=g), torch.randn(4 * world, 4, generator=g)


def _reference(world: int, steps: int):
    """One CPU process training on the whole batch: the losses and final parameters."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        x, y = _global_batch(world, step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach() for p in model.parameters()]


def _train(model, world: int, rank: int, steps: int, shard_batch: bool, dev):
    import torch.distributed as dist

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        x, y = _global_batch(world, step)
        if shard_batch:
            x, y = x.chunk(world)[rank], y.chunk(world)[rank]
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if shard_batch:  # the whole batch's loss: the mean of the ranks' equal-sized shards
            loss = loss.detach().clone()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
    return losses


def _check_training(losses, params, world, steps, what):
    ref_losses, ref_params = _reference(world, steps)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5,
                               atol=1e-6, msg=lambda m: f"{what} losses: {m}")
    assert ref_losses[-1] < ref_losses[0], ref_losses
    for p, r in zip(params, ref_params):
        assert p.device.type == "tpu", p.device
        torch.testing.assert_close(p.detach().cpu(), r, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"{what} parameters: {m}")


def _rank_training():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = _init()
    dev = torch.device("tpu", torch.tpu.current_device())
    steps = 3

    # DDP: each rank trains on its shard of the batch; gradients are averaged.
    model = DDP(_mlp().to(dev))
    losses = _train(model, world, rank, steps, True, dev)
    _check_training(losses, list(model.module.parameters()), world, steps, "DDP")

    mesh = init_device_mesh("tpu", (world,))
    # FSDP2: parameters sharded over the ranks, gathered for each forward/backward.
    model = _mlp().to(dev)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = _train(model, world, rank, steps, True, dev)
    _check_training(losses, [p.full_tensor() for p in model.parameters()], world, steps, "FSDP2")

    # DTensor tensor parallelism: the first Linear split by columns, the second by rows; every
    # rank sees the whole batch.
    model = parallelize_module(_mlp().to(dev), mesh, {"0": ColwiseParallel(),
                                                      "2": RowwiseParallel()})
    losses = _train(model, world, rank, steps, False, dev)
    _check_training(losses, [p.full_tensor() for p in model.parameters()], world, steps,
                    "tensor parallel")

    # distribute_tensor + redistribute
    full = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    d = distribute_tensor(full.to(dev), mesh, [Shard(0)])
    assert isinstance(d, DTensor) and d.to_local().shape == (6 // world, 4)
    _close(d.redistribute(mesh, [Replicate()]).to_local(), full, "DTensor redistribute")
    _close((d * 2).sum().full_tensor(), (full * 2).sum(), "DTensor sum")


# ---------------------------------------------------------------------------------------------
# Test side.


def test_backend_is_registered():
    import torch.distributed as dist

    import torchtpu.distributed  # noqa: F401

    for name in ("tpu", "tpu_dist"):
        assert name.upper() in dist.Backend._plugins
        assert dist.Backend.backend_capability[name] == ["tpu", "cpu"]
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu"


def test_local_device_index(monkeypatch):
    import torchtpu.distributed as tdist

    count = torch.tpu.device_count()
    monkeypatch.setenv("LOCAL_RANK", str(count - 1))
    assert tdist.local_device() == torch.device("tpu", count - 1)
    monkeypatch.setenv("LOCAL_RANK", str(count))
    with pytest.raises(RuntimeError, match="LOCAL_RANK"):
        tdist.local_device_index()


# The CUDA idiom, unchanged but for the device name, as a user's torchrun script has it.
_CUDA_IDIOM_SCRIPT = """
import os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
sys.path.insert(0, {here!r})
import test_distributed as t

local_rank = int(os.environ["LOCAL_RANK"])
# Before set_device: the process's own device is already current, and it sees one per local rank.
assert torch.tpu.device_count() == int(os.environ["LOCAL_WORLD_SIZE"]), torch.tpu.device_count()
assert torch.tpu.current_device() == local_rank, torch.tpu.current_device()
torch.tpu.set_device(local_rank)
dev = torch.device("tpu", local_rank)
dist.init_process_group("tpu")
rank, world = dist.get_rank(), dist.get_world_size()
model = DDP(t._mlp().to(dev), device_ids=[local_rank])
losses = t._train(model, world, rank, 3, True, dev)
t._check_training(losses, list(model.module.parameters()), world, 3, "DDP (CUDA idiom)")
assert torch.ones(2).to("tpu").device == dev          # "tpu" without an index: this process's
peer = 1 - local_rank
try:
    torch.ones(2, device=torch.device("tpu", peer))
except RuntimeError as e:
    assert "another process" in str(e) and "LOCAL_RANK" in str(e), e
else:
    raise AssertionError("a peer's device was usable")
import torchtpu.distributed as tdist
assert tdist.transport()[0] == "gloo", tdist.transport()   # XLA:CPU: no cross-process collectives
dist.destroy_process_group()
print(f"rank {{rank}} ok", flush=True)
"""


def test_cuda_idiom_under_torchrun_with_default_settings(start_python, tmp_path):
    """torchrun --nproc-per-node 2 with no torchtpu variables: each process opens one device,
    numbered tpu:LOCAL_RANK, and the CUDA idiom (set_device(LOCAL_RANK), device_ids=[LOCAL_RANK])
    trains DDP like one CPU process."""
    script = tmp_path / "train.py"
    script.write_text(_CUDA_IDIOM_SCRIPT.format(here=HERE))
    code = ("import sys; from torch.distributed.run import main; "
            f"main(['--standalone', '--nproc-per-node', '2', {str(script)!r}])")
    res = start_python(code, timeout=240, TORCHTPU_CPU_DEVICE_COUNT="", GLOO_SOCKET_IFNAME="lo",
                       OMP_NUM_THREADS="1").wait()
    for r in range(2):
        assert f"rank {r} ok" in res.stdout, res.stdout + res.stderr


def test_every_collective_matches_gloo(start_python, tmp_path):
    _run_ranks(start_python, "collectives", tmp_path)


def test_results_keep_the_staging_memory_they_take_over(start_python, tmp_path):
    _run_ranks(start_python, "lent_staging", tmp_path)


def test_ddp_fsdp2_and_tensor_parallel_train_like_one_cpu_process(start_python, tmp_path):
    _run_ranks(start_python, "training", tmp_path)


def test_init_process_group_forms(start_python, tmp_path):
    _run_ranks(start_python, "init_forms", tmp_path)


def test_functional_collectives_in_compiled_graphs(start_python, tmp_path):
    _run_ranks(start_python, "compiled", tmp_path)


def test_2x2_device_mesh_four_processes(start_python, tmp_path):
    _run_ranks(start_python, "mesh_2x2", tmp_path, world=4)


def test_errors_mixed_devices_and_mismatched_shapes(start_python, tmp_path):
    # Gloo (the host transport, as on CPU tensors) terminates a process that receives more bytes
    # than it expects; PyTorch's debug mode checks every collective's shapes across ranks first
    # and raises instead, for custom backends like this one too.
    results = _run_ranks(start_python, "errors", tmp_path, TORCH_DISTRIBUTED_DEBUG="DETAIL")
    assert all("mismatch error" in r.stdout for r in results)


def test_a_dead_rank_raises_on_the_others(start_python, tmp_path):
    procs = _start_ranks(start_python, "dies", tmp_path)
    survivor = procs[0].wait()
    assert "peer death error" in survivor.stdout, survivor.stdout + survivor.stderr
    assert procs[1].wait(check=False).returncode == 3


if __name__ == "__main__":
    _rank_main(sys.argv[1])
