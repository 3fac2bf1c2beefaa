"""Ray Train on tpu: a TorchTrainer with 2 workers, each holding one tpu device (a custom Ray
resource "tpu_device"), TorchConfig(backend="tpu"), DDP training a small MLP; the per-step
losses reported through ray.train.report must equal one CPU process training the same model on
the whole batch (DDP averages the two half-batch gradients, which is the full-batch gradient).

    .venv-dist/bin/python scripts/dist_demos/ray_train.py [--steps 8]

Each worker sees one tpu device (TORCHTPU_CPU_DEVICE_COUNT=1 on the CPU plugin) and takes it
with torchtpu.distributed.local_device(); torchtpu is imported by torch's device-backend
autoload in the worker (the torch.backends entry point), so Ray's own init_process_group call
finds the "tpu" backend. Exit status 0 only when the losses match and fall.
"""

import argparse
import json
import os
import sys
import tempfile

import torch

IN, HIDDEN, OUT, BATCH, LR = 16, 32, 4, 16, 0.1


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, OUT)
    )


def make_batch(step: int):
    g = torch.Generator().manual_seed(100 + step)
    w_true = torch.randn(IN, OUT, generator=torch.Generator().manual_seed(7))
    x = torch.randn(BATCH, IN, generator=g)
    return x, torch.tanh(x @ w_true)


def reference_losses(steps: int) -> list[float]:
    """One CPU process, full batch."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(steps):
        x, y = make_batch(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_loop_per_worker(config: dict) -> None:
    import torch.distributed as dist
    import ray.train
    import torchtpu
    import torchtpu.distributed as tdist

    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    device = tdist.local_device()
    torch.tpu.set_device(device)
    model = torch.nn.parallel.DistributedDataParallel(make_model().to(device))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    shard = BATCH // world
    losses = []
    for step in range(config["steps"]):
        x, y = make_batch(step)
        x = x[rank * shard:(rank + 1) * shard].to(device)
        y = y[rank * shard:(rank + 1) * shard].to(device)
        local = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        local.backward()
        opt.step()
        # The full-batch loss: the mean of the equal-sized shards' means, averaged on tpu.
        full = local.detach().clone()
        dist.all_reduce(full, op=dist.ReduceOp.AVG)
        losses.append(full.item())
        metrics = {"step": step, "losses": list(losses), "backend": backend,
                   "device": str(full.device), "world_size": world,
                   "torchtpu": torchtpu.__file__}
        if rank == 0 and step == config["steps"] - 1:
            # The last report carries a checkpoint (the history as JSON): Ray Train's Result
            # holds the metrics of the report with the latest checkpoint.
            with tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, "losses.json"), "w") as f:
                    json.dump(metrics, f)
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))
        else:
            ray.train.report(metrics)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    env = {"TORCHTPU_CPU_DEVICE_COUNT": "1", "OMP_NUM_THREADS": "1"}
    ray.init(num_cpus=2, resources={"tpu_device": 2}, include_dashboard=False,
             runtime_env={"env_vars": env}, logging_level="WARNING")
    try:
        with tempfile.TemporaryDirectory(prefix="ray_demo_") as storage:
            trainer = TorchTrainer(
                train_loop_per_worker,
                train_loop_config={"steps": args.steps},
                torch_config=TorchConfig(backend="tpu", timeout_s=300),
                scaling_config=ScalingConfig(
                    num_workers=2, use_gpu=False,
                    resources_per_worker={"CPU": 1, "tpu_device": 1}),
                run_config=RunConfig(name="torchtpu_ray_demo", storage_path=storage),
            )
            result = trainer.fit()
            if result.error is None and result.checkpoint is not None:
                with result.checkpoint.as_directory() as folder:
                    with open(os.path.join(folder, "losses.json")) as f:
                        last = json.load(f)
    finally:
        ray.shutdown()
    if result.error is not None:
        print(f"ray_demo: training failed: {result.error}", file=sys.stderr)
        return 1
    if result.checkpoint is None:
        print("ray_demo: the run left no checkpoint", file=sys.stderr)
        return 1
    got = [float(v) for v in last["losses"]]
    want = reference_losses(args.steps)
    print(json.dumps({"backend": last["backend"], "device": last["device"],
                      "world_size": last["world_size"], "torchtpu": last["torchtpu"]}))
    for step, (g, w) in enumerate(zip(got, want)):
        print(f"step {step}: loss tpu x2 (Ray) {g:.6f}  cpu x1 {w:.6f}  diff {abs(g - w):.2e}")
    # float32 on both sides; the two-shard mean and the one-process mean differ by rounding.
    ok = (len(got) == args.steps and last["backend"] == "tpu"
          and last["device"].startswith("tpu") and last["world_size"] == 2
          and all(abs(g - w) <= 1e-5 + 1e-4 * abs(w) for g, w in zip(got, want))
          and got[-1] < got[0])
    print("ray_demo: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
