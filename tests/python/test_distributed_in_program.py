"""Collectives inside XLA programs: 4 ranks as threads of this process, each on its own device of
the XLA CPU plugin (tpu:0..3, one PJRT world), so the tpu backend runs every collective as an XLA
program with the collective inside (csrc/distributed/xla_transport.h).

Every rank checks its results against the same collective run by torch's gloo backend on CPU
tensors, or against one CPU process training on the whole batch; collective_host_bytes proves
nothing was staged through host memory.
"""

from __future__ import annotations

import datetime
import threading
import time

import pytest
import torch

import torchtpu
import torchtpu.testing
from torchtpu.testing.distributed import run_ranks_in_threads

import test_distributed as multi_process

W = 4
# Thread ranks share the CPU's default generator: models are made one at a time (each seeds it).
_model_lock = threading.Lock()


def _mlp():
    with _model_lock:
        return multi_process._mlp()


def _check_training(losses, params, world, steps, what):
    # The reference model seeds the shared generator too.
    with _model_lock:
        ref_losses, ref_params = multi_process._reference(world, steps)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5,
                               atol=1e-6, msg=lambda m: f"{what} losses: {m}")
    assert ref_losses[-1] < ref_losses[0], ref_losses
    for p, r in zip(params, ref_params):
        assert p.device.type == "tpu", p.device
        torch.testing.assert_close(p.detach().cpu(), r, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"{what} parameters: {m}")


def _close(actual, expected, what):
    assert actual.device.type == "tpu", f"{what}: result on {actual.device}"
    torch.testing.assert_close(actual.cpu(), expected, msg=lambda m: f"{what}: {m}")


def _metrics():
    m = torchtpu.metrics()
    return m["collectives_in_program"], m["collective_host_bytes"]


@pytest.fixture
def counted():
    """collectives_in_program and collective_host_bytes gained during the test."""
    before = _metrics()

    def delta():
        now = _metrics()
        return now[0] - before[0], now[1] - before[1]

    return delta


def _rank_collectives(rank):
    import torch.distributed as dist

    from torchtpu.testing.distributed import check_every_collective

    assert torchtpu.distributed.transport()[0] == "xla", torchtpu.distributed.transport()
    check_every_collective(rank, W, torch.device("tpu", rank), dist.new_group(backend="gloo"))
    return True


def test_every_collective_runs_in_programs_and_matches_gloo(counted):
    assert run_ranks_in_threads(_rank_collectives, W) == [True] * W
    in_program, host_bytes = counted()
    assert host_bytes == 0, f"{host_bytes} bytes staged through host memory"
    assert in_program >= 60 * W, in_program


def _rank_groups(rank):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dev = torch.device("tpu", rank)
    # Subgroups: every rank creates both; each reduces over its own.
    evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])
    mine = evens if rank % 2 == 0 else odds
    assert torchtpu.distributed.transport(mine)[0] == "xla"
    t = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(t, group=mine)
    peers = [0, 2] if rank % 2 == 0 else [1, 3]
    _close(t, torch.full((3,), float(sum(r + 1 for r in peers))), "subgroup all_reduce")
    out = torch.empty(2, device=dev)
    dist.all_gather_into_tensor(out, torch.tensor([float(rank)], device=dev), group=mine)
    _close(out, torch.tensor([float(r) for r in peers]), "subgroup all_gather")
    # send/recv inside a subgroup: group ranks, not global ranks, address the peer.
    x = torch.full((2,), float(rank), device=dev)
    if dist.get_rank(mine) == 0:
        dist.send(x, group_dst=1, group=mine)
    else:
        dist.recv(x, group_src=0, group=mine)
        _close(x, torch.full((2,), float(peers[0])), "subgroup recv")
    # DeviceMesh dimensions: each dimension's group reduces over its own ranks only.
    mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    for name, dim_peers in (("dp", [tp, tp + 2]), ("tp", [2 * dp, 2 * dp + 1])):
        assert torchtpu.distributed.transport(mesh.get_group(name))[0] == "xla"
        t = torch.full((2,), float(rank + 1), device=dev)
        dist.all_reduce(t, group=mesh.get_group(name))
        _close(t, torch.full((2,), float(sum(r + 1 for r in dim_peers))), f"all_reduce over {name}")
    return True


def test_subgroups_and_device_mesh_dimensions(counted):
    assert run_ranks_in_threads(_rank_groups, W) == [True] * W
    assert counted()[1] == 0


def _rank_training(rank):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device("tpu", rank)
    steps = 3
    model = DDP(_mlp().to(dev))
    losses = multi_process._train(model, W, rank, steps, True, dev)
    _check_training(losses, list(model.module.parameters()), W, steps, "DDP")

    mesh = init_device_mesh("tpu", (W,))
    model = _mlp().to(dev)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = multi_process._train(model, W, rank, steps, True, dev)
    _check_training(losses, [p.full_tensor() for p in model.parameters()], W, steps,
                                  "FSDP2")

    # 2x2: tensor parallel inside each dp pair, FSDP2 across them.
    mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp = mesh.get_local_rank("dp")
    model = parallelize_module(_mlp().to(dev), mesh["tp"], {"0": ColwiseParallel(),
                                                             "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        x, y = multi_process._global_batch(2, step)
        x, y = x.chunk(2)[dp], y.chunk(2)[dp]
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss = loss.detach().clone()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=mesh.get_group("dp"))
        losses.append(loss.item())
    _check_training(losses, [p.full_tensor() for p in model.parameters()], 2, steps,
                                  "FSDP x TP")
    return True


def test_ddp_fsdp2_and_2x2_mesh_train_like_one_cpu_process(counted):
    assert run_ranks_in_threads(_rank_training, W) == [True] * W
    in_program, host_bytes = counted()
    assert host_bytes == 0, f"{host_bytes} bytes staged through host memory"
    assert in_program > 0


def test_bad_input_raises_on_every_rank_instead_of_hanging():
    import torch.distributed as dist

    # Tensors on both cpu and tpu in one collective: raised at the call on every rank.
    def mixed(rank):
        with pytest.raises(RuntimeError, match="cpu and tpu"):
            dist.all_gather([torch.empty(2), torch.empty(2, device="tpu")] * 2,
                            torch.ones(2, device="tpu"))
        return True

    def mismatched_only(rank):
        t = torch.ones(3 if rank == 1 else 4, device="tpu")
        with pytest.raises(RuntimeError, match="launch different programs"):
            dist.all_reduce(t)
        t = torch.ones(4, device="tpu")
        dist.all_reduce(t)
        _close(t, torch.full((4,), float(W)), "all_reduce after a mismatch")
        with pytest.raises(RuntimeError, match="elements"):
            dist.all_gather_into_tensor(torch.empty(5, device="tpu"), torch.ones(2, device="tpu"))
        bad_splits = [1, 1, 1, 1] if rank != 2 else [2, 0, 1, 1]
        with pytest.raises(RuntimeError, match="sends"):
            dist.all_to_all_single(torch.empty(4, device="tpu"), torch.ones(4, device="tpu"),
                                   [1, 1, 1, 1], bad_splits)
        return True

    assert run_ranks_in_threads(mismatched_only, W) == [True] * W
    assert run_ranks_in_threads(mixed, W) == [True] * W

    # A rank that skips a collective: the others raise within the group's timeout, and nothing
    # was launched, so no device waits forever.
    def skipping(rank):
        if rank == 2:
            return "skipped"
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="did not reach it within 2000 ms"):
            dist.all_reduce(torch.ones(4, device="tpu"))
        return time.monotonic() - start

    out = run_ranks_in_threads(skipping, W, timeout=datetime.timedelta(seconds=2))
    assert out[2] == "skipped"
    assert all(1.5 < s < 60 for k, s in enumerate(out) if k != 2), out


def test_changing_values_never_recompile():
    import torch.distributed as dist

    def body(rank):
        for step in range(4):
            t = torch.full((8,), float(rank), device="tpu")
            factor = 0.5 ** step
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
            _close(t, torch.full((8,), factor * sum(range(W))), f"premul step {step}")
            view = torch.zeros(4 * W, device="tpu").narrow(0, step, 4)  # another offset each step
            dist.all_reduce(view)
            if step == 0:
                torch.tpu.synchronize()
                dist.barrier()
                if rank == 0:
                    compiled.append(torchtpu.metrics()["programs_compiled"])
                dist.barrier()
        return True

    compiled = []
    assert run_ranks_in_threads(body, W) == [True] * W
    assert torchtpu.metrics()["programs_compiled"] == compiled[0]


def test_host_staging_when_asked_or_when_ranks_share_a_device(monkeypatch, counted):
    import torch.distributed as dist

    def body(rank):
        t = torch.full((4,), float(rank + 1), device="tpu")
        dist.all_reduce(t)
        _close(t, torch.full((4,), float(sum(range(1, W + 1)))), "staged all_reduce")
        return torchtpu.distributed.transport()

    monkeypatch.setenv("TORCHTPU_COLLECTIVES", "host")
    out = run_ranks_in_threads(body, W)
    assert all(kind == "gloo" and "TORCHTPU_COLLECTIVES=host" in why for kind, why in out), out
    assert counted()[1] > 0
    monkeypatch.delenv("TORCHTPU_COLLECTIVES")
    out = run_ranks_in_threads(body, W, devices=[0, 1, 1, 2])
    assert all(kind == "gloo" and "share tpu:1" in why for kind, why in out), out


def test_run_ranks_in_threads_returns_in_rank_order_and_reraises_the_first_failure():
    assert run_ranks_in_threads(lambda r: r * 10, 3) == [0, 10, 20]

    def fails(rank):
        if rank == 1:
            raise KeyError("rank one failed")
        return rank

    with pytest.raises(KeyError, match="rank one failed") as info:
        run_ranks_in_threads(fails, 2)
    assert any("thread rank 1 of 2" in note for note in info.value.__notes__)
    with pytest.raises(ValueError, match="TORCHTPU_CPU_DEVICE_COUNT"):
        run_ranks_in_threads(lambda r: r, torch.tpu.device_count() + 1)
    # Outside the call, torch.distributed is as it was.
    import torch.distributed as dist

    assert not dist.is_initialized()


# Compiled graphs: the collectives go inside the graph's one program.

def _train_steps(compiled, rank, barrier, dev, steps):
    """compiled(x, y) on this rank's chunk of each step's global batch: the losses, and the
    programs every rank launched per step."""
    losses, per_rank = [], []
    for s in range(steps):
        x, y = multi_process._global_batch(W, s)
        x, y = x.chunk(W)[rank].to(dev), y.chunk(W)[rank].to(dev)
        loss, launched = _programs_per_rank(rank, barrier, lambda: compiled(x, y))
        losses.append(loss.item())
        per_rank.append(launched)
    return losses, per_rank


def _programs_per_rank(rank, barrier, fn):
    """fn()'s result and the programs every rank launched while all ranks ran it once."""
    torch.tpu.synchronize()
    barrier.wait()
    before = torchtpu.metrics()["executions"]
    barrier.wait()
    out = fn()
    torch.tpu.synchronize()
    barrier.wait()
    launched = torchtpu.metrics()["executions"] - before
    barrier.wait()
    return out, launched / W


def _collective_graphs(names_before):
    """{graph name: how its collectives run} of the graphs compiled since `names_before`."""
    from torchtpu import _dynamo

    return {name: m["collectives"] for name, m in _dynamo.graph_metrics().items()
            if "collectives" in m and name not in names_before}


def test_compile_step_ddp_step_is_one_program_per_rank_and_trains_like_one_cpu_process(counted):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torchtpu import _dynamo

    barrier = threading.Barrier(W)
    graphs_before = set(_dynamo.graph_metrics())
    steps = 3

    def body(rank):
        dev = torch.device("tpu", rank)
        model = _mlp().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():  # DDP's gradient averaging, inside the program
                p.grad.copy_(funcol.all_reduce(p.grad, "avg", dist.group.WORLD))
            opt.step()
            return funcol.all_reduce(loss.detach(), "avg", dist.group.WORLD)

        compiled = torchtpu.compile_step(step, model, opt)
        losses, per_rank = _train_steps(compiled, rank, barrier, dev, steps)
        _check_training(losses, list(model.parameters()), W, steps, "compiled DDP step")
        return per_rank

    out = run_ranks_in_threads(body, W)
    # The first step's grads do not exist before it: its own signature (installs .grad).
    assert all(p == [1.0] * steps for p in out), f"programs per rank per step: {out}"
    graphs = _collective_graphs(graphs_before)
    assert graphs and set(graphs.values()) == {"in program"}, graphs
    in_program, host_bytes = counted()
    assert host_bytes == 0
    # 4 gradients and the loss, per rank and step.
    assert in_program == 5 * W * steps, in_program


def _tp_forward(x, w, group):
    """A tensor-parallel-like forward with every functional collective the lowering table has."""
    import torch.distributed._functional_collectives as funcol

    h = torch.relu(x @ w)                                            # column shard
    full = funcol.all_gather_tensor(h, 0, group)                    # [W*4, 6]
    summed = funcol.all_reduce(full * 2, "sum", group)
    part = funcol.reduce_scatter_tensor(summed, "avg", 0, group)     # [4, 6]
    swapped = funcol.all_to_all_single(part, None, None, group)      # [4, 6]
    root = funcol.broadcast(swapped + 1, 2, group)
    biggest = funcol.all_reduce(x, "max", group)
    return root.sum(1) + biggest.sum(1)


def _tp_inputs(rank, scale):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(rank)) * scale
    return x, torch.randn(5, 6, generator=torch.Generator().manual_seed(10 + rank))


def _tp_expected(rank, scale):
    """_tp_forward of rank `rank`, computed on the CPU from every rank's inputs."""
    inputs = [_tp_inputs(r, scale) for r in range(W)]
    summed = torch.cat([torch.relu(x @ w) for x, w in inputs]) * 2 * W
    parts = summed.chunk(W)  # each rank's reduce_scatter result (the avg of W equal copies)
    swapped = [torch.cat([p.chunk(W)[r] for p in parts]) for r in range(W)]
    root = swapped[2] + 1
    return root.sum(1) + torch.stack([x for x, _ in inputs]).amax(0).sum(1)


def test_torch_compile_lowers_functional_collectives_into_one_program(counted):
    import torch.distributed as dist
    from torchtpu import _dynamo

    torch._dynamo.lookup_backend("tpu")  # registered once, before the ranks compile
    barrier = threading.Barrier(W)
    graphs_before = set(_dynamo.graph_metrics())

    def body(rank):
        forward = torch.compile(_tp_forward, backend="tpu", fullgraph=True)
        dev = torch.device("tpu", rank)
        for scale in (1.0, 2.0, 3.0):  # new values, the same program
            x, w = _tp_inputs(rank, scale)
            out, launched = _programs_per_rank(
                rank, barrier, lambda: forward(x.to(dev), w.to(dev), dist.group.WORLD))
            assert launched == 1.0, f"{launched} programs per rank"
            _close(out, _tp_expected(rank, scale), f"compiled collectives, scale {scale}")
        return True

    compiled_before = torchtpu.metrics()["programs_compiled"]
    assert run_ranks_in_threads(body, W) == [True] * W
    graphs = _collective_graphs(graphs_before)
    assert graphs and set(graphs.values()) == {"in program"}, graphs
    # One module, shared by the ranks' graphs; the later calls' values compile nothing.
    assert torchtpu.metrics()["programs_compiled"] - compiled_before <= 1
    in_program, host_bytes = counted()
    assert host_bytes == 0
    assert in_program == 6 * W * 3, in_program


def test_compiled_graph_is_split_at_collectives_of_a_host_staged_group(monkeypatch, counted):
    import torch.distributed as dist
    from torchtpu import _dynamo

    torch._dynamo.lookup_backend("tpu")
    graphs_before = set(_dynamo.graph_metrics())
    monkeypatch.setenv("TORCHTPU_COLLECTIVES", "host")

    def body(rank):
        import torch.distributed._functional_collectives as funcol

        f = torch.compile(lambda t: funcol.all_reduce(t * 2, "sum", dist.group.WORLD) + 1,
                          backend="tpu")
        out = f(torch.full((4,), float(rank + 1), device=torch.device("tpu", rank)))
        _close(out, torch.full((4,), 2.0 * sum(range(1, W + 1)) + 1), "split graph")
        return True

    assert run_ranks_in_threads(body, W) == [True] * W
    graphs = _collective_graphs(graphs_before)
    assert graphs and all(how.startswith("split: ") and "stages through the host" in how
                          for how in graphs.values()), graphs
    in_program, host_bytes = counted()
    assert in_program == 0 and host_bytes > 0


def test_each_group_logs_its_transport_and_why(caplog, monkeypatch):
    import logging

    import torch.distributed as dist

    def body(rank):
        pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        sub = pairs[rank % 2]
        return torchtpu.distributed.transport(sub)[0]

    with caplog.at_level(logging.INFO, logger="torchtpu.distributed"):
        assert run_ranks_in_threads(body, W) == ["xla"] * W
        monkeypatch.setenv("TORCHTPU_COLLECTIVES", "host")
        run_ranks_in_threads(lambda rank: None, 2)
    lines = [r.getMessage() for r in caplog.records if r.name == "torchtpu.distributed"]
    in_program = [l for l in lines if "collectives inside XLA programs" in l]
    staged = [l for l in lines if "host staging over gloo: TORCHTPU_COLLECTIVES=host" in l]
    # The 4 ranks' default group and their pair groups (new_group is called by every rank for
    # both pairs: 2 groups x 2 members); then 2 staged ranks.
    assert len(in_program) == W + W, lines
    assert all("devices [" in l and "threads of this process" in l for l in in_program), lines
    assert len(staged) == 2, lines


class _Shards(torch.nn.Module):
    """Each parameter of a model as its rank-th flat shard, padded to W parts (FSDP's layout)."""

    def __init__(self, model, rank):
        super().__init__()
        self.layout = {}  # parameter name -> (attribute, shape, numel)
        for name, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            flat = torch.cat([flat, flat.new_zeros((-flat.numel()) % W)])
            attr = name.replace(".", "_")
            self.layout[name] = (attr, p.shape, p.numel())
            self.register_parameter(attr, torch.nn.Parameter(flat.chunk(W)[rank].clone()))


def test_compile_step_fsdp_step_is_one_program_per_rank_and_trains_like_one_cpu_process(counted):
    """ZeRO-3 / FSDP written with functional collectives: each step all-gathers the parameters
    (whose backward reduce-scatters the gradients), inside one program per rank."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.func import functional_call

    barrier = threading.Barrier(W)
    steps = 3

    def body(rank):
        dev = torch.device("tpu", rank)
        model = _mlp()
        shards = _Shards(model, rank).to(dev)
        model = model.to("meta")  # structure only: the step gathers its parameters
        opt = torch.optim.SGD(shards.parameters(), lr=0.1)

        def step(x, y):
            params = {}
            for name, (attr, shape, numel) in shards.layout.items():
                full = funcol.all_gather_tensor_autograd(getattr(shards, attr), 0,
                                                         dist.group.WORLD)
                params[name] = full[:numel].reshape(shape)
            loss = torch.nn.functional.mse_loss(functional_call(model, params, (x,)), y)
            opt.zero_grad()
            loss.backward()
            for p in shards.parameters():
                p.grad.div_(W)  # the gather's backward summed the ranks' gradients
            opt.step()
            return funcol.all_reduce(loss.detach(), "avg", dist.group.WORLD)

        compiled = torchtpu.compile_step(step, shards, opt)
        losses, per_rank = _train_steps(compiled, rank, barrier, dev, steps)
        return losses, per_rank, {n: getattr(shards, a).detach().cpu()
                                  for n, (a, _, _) in shards.layout.items()}, shards.layout

    out = run_ranks_in_threads(body, W)
    assert all(per_rank == [1.0] * steps for _, per_rank, _, _ in out), [o[1] for o in out]
    params = []
    for name, (_, shape, numel) in out[0][3].items():
        params.append(torch.cat([o[2][name] for o in out])[:numel].reshape(shape).to("tpu"))
    _check_training(out[0][0], params, W, steps, "compiled FSDP step")
    in_program, host_bytes = counted()
    assert host_bytes == 0
    assert in_program > 0
