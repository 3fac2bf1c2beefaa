"""DDP train step time on 2 ranks: the "tpu" c10d backend on tpu tensors vs torch's gloo backend
on CPU tensors (the baseline, measured in the same processes), and each against the same step
without DDP (no gradient all-reduce) on the same device, which shows what the communication
costs. One JSON object per line, printed by rank 0 (append them to benchmarks/results/).

    .venv/bin/python benchmarks/ddp_step.py [--hidden 1024] [--layers 4] [--batch 32] [--iters 10]

The model is an MLP (`--layers` Linear(hidden, hidden) + ReLU), SGD, MSE loss; a step is
forward, backward (DDP all-reduces the gradients in buckets, overlapped with the backward) and
the optimizer step, then a sync (torch.tpu.synchronize() on tpu), so each timed step is
complete. Time is the median of --iters steps after 3 warm-up steps (compiles, connections).
Both ranks run each configuration at the same time, so they share the machine's cores alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import ranks


def _model(hidden: int, layers: int):
    import torch

    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def _step_seconds(model, device, args, sync) -> float:
    import torch
    import torch.distributed as dist

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1 + dist.get_rank())
    x = torch.randn(args.batch, args.hidden, generator=g).to(device)
    y = torch.randn(args.batch, args.hidden, generator=g).to(device)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()

    for _ in range(3):
        step()
    times = []
    for _ in range(args.iters):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _rank(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, dev, gloo = ranks.join(args.store, timeout_s=300)
    cpu = torch.device("cpu")

    def tpu_sync():
        torch.tpu.synchronize()

    def no_sync():
        pass

    ms = {
        "tpu_ddp": _step_seconds(DDP(_model(args.hidden, args.layers).to(dev)), dev, args,
                                 tpu_sync),
        # DDP's gradient_as_bucket_view=True: the gradients live in the buckets, so the step has
        # no copies between gradients and buckets (device ops on tpu).
        "tpu_ddp_bucket_view": _step_seconds(
            DDP(_model(args.hidden, args.layers).to(dev), gradient_as_bucket_view=True), dev,
            args, tpu_sync),
        "tpu_one": _step_seconds(_model(args.hidden, args.layers).to(dev), dev, args, tpu_sync),
        "gloo_cpu_ddp": _step_seconds(DDP(_model(args.hidden, args.layers), process_group=gloo),
                                      cpu, args, no_sync),
        "cpu_one": _step_seconds(_model(args.hidden, args.layers), cpu, args, no_sync),
    }
    ms = {k: v * 1e3 for k, v in ms.items()}
    if rank == 0:
        params = sum(p.numel() for p in _model(args.hidden, args.layers).parameters())
        print(json.dumps({
            "bench": "ddp_step", "ranks": world, "hidden": args.hidden, "layers": args.layers,
            "batch_per_rank": args.batch, "grad_mib": params * 4 / 2**20, "iters": args.iters,
            "tpu_ddp_ms": ms["tpu_ddp"], "tpu_ddp_bucket_view_ms": ms["tpu_ddp_bucket_view"],
            "tpu_one_process_ms": ms["tpu_one"],
            "gloo_cpu_ddp_ms": ms["gloo_cpu_ddp"], "cpu_one_process_ms": ms["cpu_one"],
            "tpu_ddp_over_gloo_cpu_ddp": ms["tpu_ddp"] / ms["gloo_cpu_ddp"],
            "tpu_ddp_over_tpu_one": ms["tpu_ddp"] / ms["tpu_one"],
            "tpu_ddp_bucket_view_over_gloo_cpu_ddp": ms["tpu_ddp_bucket_view"] / ms["gloo_cpu_ddp"],
            "gloo_cpu_ddp_over_cpu_one": ms["gloo_cpu_ddp"] / ms["cpu_one"],
        }), flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--iters", type=int, default=10)
    ranks.add_arguments(parser)
    args = parser.parse_args()
    if ranks.is_rank(args):
        _rank(args)
        return
    ranks.launch(__file__, args.world, [
        "--hidden", str(args.hidden), "--layers", str(args.layers), "--batch", str(args.batch),
        "--iters", str(args.iters)], env={"OMP_NUM_THREADS": "1"})


if __name__ == "__main__":
    main()
