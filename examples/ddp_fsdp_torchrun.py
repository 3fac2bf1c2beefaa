"""Data-parallel training on tpu under torchrun, the way it is written for CUDA: DDP, or FSDP2
(`fully_shard`), on the "tpu" c10d backend.

    TORCHTPU_CPU_DEVICE_COUNT=1 torchrun --nproc-per-node 2 examples/ddp_fsdp_torchrun.py --mode ddp
    TORCHTPU_CPU_DEVICE_COUNT=1 torchrun --nproc-per-node 2 examples/ddp_fsdp_torchrun.py --mode fsdp

Each rank trains on its half of every batch; rank 0 also trains the same model on the whole batch
in one CPU process and checks that the losses agree (the reference any data-parallel run must hit).
On the XLA CPU plugin each process gets one device (TORCHTPU_CPU_DEVICE_COUNT=1).
"""

import argparse
import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import torchtpu.distributed


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 4))


def batches(steps: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g))
            for _ in range(steps)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()

    device = torchtpu.distributed.local_device()  # tpu:LOCAL_RANK, or tpu:0 with one device each
    torch.tpu.set_device(device)
    dist.init_process_group("tpu")
    rank, world = dist.get_rank(), dist.get_world_size()

    reference = make_model()
    model = copy.deepcopy(reference).to(device)
    if args.mode == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)

    for step, (x, y) in enumerate(batches(args.steps)):
        shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x[shard].to(device)), y[shard].to(device))
        loss.backward()
        opt.step()
        # The global loss: the mean of the ranks' shard losses (equal shards).
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)

        ref_opt.zero_grad()
        ref_loss = nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        if rank == 0:
            print(f"step {step}: {args.mode} loss {global_loss.item():.6f}  one CPU process "
                  f"{ref_loss.item():.6f}")
        torch.testing.assert_close(global_loss.cpu(), ref_loss.detach(), rtol=1e-5, atol=1e-6)

    dist.destroy_process_group()
    if rank == 0:
        print(f"{args.mode} on {world} tpu ranks matches one CPU process")


if __name__ == "__main__":
    main()
