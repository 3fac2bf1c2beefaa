"""Two-or-more-rank benchmarks on one host, shared by benchmarks/collectives.py and ddp_step.py
(run them as `python benchmarks/x.py`, which puts this folder on sys.path): the parent starts one
process per rank with a file store, each rank joins the "tpu" process group on its own device and
makes a gloo group for the CPU baseline."""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile


def add_arguments(parser) -> None:
    """--world (ranks, default 2) and --store (set by `launch` for the ranks it starts)."""
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--store", default="", help=argparse.SUPPRESS)


def is_rank(args) -> bool:
    """Whether this process is one of the ranks `launch` started (else it is the parent)."""
    return os.environ.get("RANK") is not None and bool(args.store)


def join(store: str, timeout_s: int):
    """Joins the "tpu" process group as RANK of WORLD_SIZE on tpu:LOCAL_RANK (one device per
    process); returns (rank, world, the rank's tpu device, a gloo group for CPU tensors)."""
    import torch
    import torch.distributed as dist

    import torchtpu  # noqa: F401
    import torchtpu.distributed as tdist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.tpu.set_device(tdist.local_device())
    dist.init_process_group("tpu", init_method="file://" + store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    gloo = dist.new_group(backend="gloo")
    return rank, world, torch.device("tpu", torch.tpu.current_device()), gloo


def launch(script: str, world: int, argv: list[str], env: dict[str, str] | None = None) -> None:
    """Runs `script --store STORE --world WORLD *argv` as `world` ranks (one XLA:CPU device each,
    gloo over loopback, plus `env`), waits for all of them (30 minutes at most) and exits with
    the first failing rank's status."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = []
        for r in range(world):
            rank_env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                            TORCHTPU_CPU_DEVICE_COUNT="1", GLOO_SOCKET_IFNAME="lo", **(env or {}))
            procs.append(subprocess.Popen(
                [sys.executable, script, "--store", store, "--world", str(world), *argv],
                env=rank_env))
        rc = 0
        try:
            for p in procs:
                rc = p.wait(timeout=1800) or rc
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        sys.exit(rc)
