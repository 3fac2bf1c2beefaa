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

    import torchtpu.distributed as tdist
    from torchtpu.testing.distributed import check_every_collective

    rank, world = _init()
    kind, why = tdist.transport()      # XLA:CPU across processes: host staging, and why
    assert kind == "gloo" and "XLA CPU plugin has no cross-process collectives" in why, why
    check_every_collective(rank, world, torch.device("tpu", torch.tpu.current_device()),
                           dist.new_group(backend="gloo"))


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


def _rank_ddp_compiled_autograd():
    """A real DDP module under torch.compile, its backward under compiled autograd with
    optimize_ddp="python_reducer" (PyTorch's way of putting DDP's gradient all-reduces into the
    compiled backward graph instead of the C++ reducer's hooks)."""
    import torch._dynamo
    import torch.distributed as dist
    from torch._dynamo.utils import counters
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = _init()
    dev = torch.device("tpu", torch.tpu.current_device())
    torch._dynamo.config.optimize_ddp = "python_reducer"
    model = DDP(_mlp().to(dev))
    compiled = torch.compile(model, backend="tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps, losses = 3, []
    for step in range(steps):
        x, y = _global_batch(world, step)
        x, y = x.chunk(world)[rank].to(dev), y.chunk(world)[rank].to(dev)
        with torch._dynamo.compiled_autograd._enable(torch.compile(backend="tpu")):
            loss = torch.nn.functional.mse_loss(compiled(x), y)
            opt.zero_grad()
            loss.backward()
        opt.step()
        loss = loss.detach().clone()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
    assert counters["compiled_autograd"]["captures"] >= 1, dict(counters["compiled_autograd"])
    ref_losses, ref_params = _reference(world, steps)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5,
                               atol=1e-6)
    for p, r in zip(model.module.parameters(), ref_params):
        torch.testing.assert_close(p.detach().cpu(), r, rtol=1e-5, atol=1e-6)


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
kind, why = tdist.transport()            # XLA:CPU: host staging, and the reason
assert kind == "gloo" and "XLA CPU plugin has no cross-process collectives" in why, why
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


def test_pjrt_key_value_callbacks_over_a_tcp_store():
    """The PJRT plugin's key-value callbacks, called as a plugin calls them (from several threads
    at once), served by a c10d TCPStore: get blocks until some thread puts, try_get does not, a
    missing key times out as DEADLINE_EXCEEDED, and a chain of blocking gets, each waiting for the
    previous thread's put, completes (one shared TCPStore client would serialise them)."""
    import threading

    import torch.distributed as dist

    from torchtpu import _C

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    kv = _C._KvCallbacksForTest(server, "pjrt/kv")
    assert kv.try_get("topology/0") is None
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("v", kv.get("topology/0", 20000)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive(), "get returned before the put"
    value = b"\x00\x01topology\xff"
    kv.put("topology/0", value)
    waiter.join(20)
    assert got["v"] == value and kv.try_get("topology/0") == value
    assert server.get("pjrt/kv/topology/0") == value          # under the prefix, in the store
    with pytest.raises(RuntimeError, match="code 4"):          # PJRT_Error_Code_DEADLINE_EXCEEDED
        kv.get("never", 200)
    results, threads = {}, []
    for t in range(6):
        def chain(t=t):
            results[t] = kv.get(f"k{t - 1}", 20000) if t else b"start"
            kv.put(f"k{t}", f"v{t}".encode())
        threads.append(threading.Thread(target=chain))
    for th in reversed(threads):
        th.start()
    for th in threads:
        th.join(30)
    assert [results.get(t) for t in range(1, 6)] == [f"v{t - 1}".encode() for t in range(1, 6)]


def test_pjrt_world_is_never_joined_on_xla_cpu(monkeypatch):
    """XLA:CPU has no cross-process collectives: even with TORCHTPU_PJRT_WORLD=1 the process does
    not join a world (nothing is written to the store) and says why."""
    import torch.distributed as dist

    from torchtpu import _C

    monkeypatch.setenv("TORCHTPU_PJRT_WORLD", "1")
    store = dist.HashStore()
    joined, why = _C._pjrt_world_join(store, 0, 2)
    assert not joined and "XLA CPU plugin has no cross-process collectives" in why, why
    assert not store.check(["pjrt/world_id"])


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


def test_ddp_module_under_torch_compile_and_compiled_autograd(start_python, tmp_path):
    _run_ranks(start_python, "ddp_compiled_autograd", tmp_path)


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
