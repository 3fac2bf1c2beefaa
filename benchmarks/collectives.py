"""Bus bandwidth of all_reduce / all_gather / reduce_scatter on 2 ranks: the "tpu" backend on
tpu tensors vs torch's gloo backend on CPU tensors (the baseline, measured in the same
processes), 4 KiB..64 MiB, plus what the host staging alone costs (device->host + host->device
copies of the same bytes). One JSON object per line, printed by rank 0.

    .venv/bin/python benchmarks/collectives.py [--max-mib 64] [--iters 5]

Bus bandwidth follows nccl-tests: all_reduce moves 2(n-1)/n of the buffer per rank, all_gather
and reduce_scatter (n-1)/n of the full (gathered) buffer. Time is the median of --iters calls,
each one complete (Work waited; for tpu the result is back in the tpu tensor).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def _median_seconds(fn, iters: int) -> float:
    fn()  # warm-up: connections, program compiles
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _rank(args) -> None:
    import torch
    import torch.distributed as dist

    import torchtpu  # noqa: F401
    import torchtpu.distributed as tdist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.tpu.set_device(tdist.local_device())
    dist.init_process_group("tpu", init_method="file://" + args.store, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    dev = torch.device("tpu", torch.tpu.current_device())
    size = 4 * 1024
    while size <= args.max_mib * 1024 * 1024:
        n = size // 4  # float32 elements of the full buffer
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            results = {}
            for backend in ("tpu", "gloo"):
                d = dev if backend == "tpu" else torch.device("cpu")
                group = None if backend == "tpu" else gloo
                full = torch.ones(n, device=d)
                shard = torch.ones(n // world, device=d)
                if op == "all_reduce":
                    def run():
                        dist.all_reduce(full, group=group)
                elif op == "all_gather":
                    def run():
                        dist.all_gather_into_tensor(full, shard, group=group)
                else:
                    def run():
                        dist.reduce_scatter_tensor(shard, full, group=group)
                dist.barrier()
                results[backend] = _median_seconds(run, args.iters)
            factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
            if rank == 0:
                x = torch.ones(n, device=dev)
                host = torch.ones(n)
                d2h = _median_seconds(lambda: x.cpu(), args.iters)
                h2d = _median_seconds(lambda: (x.copy_(host), torch.tpu.synchronize()),
                                      args.iters)
                print(json.dumps({
                    "op": op, "bytes": size, "ranks": world,
                    "tpu_ms": results["tpu"] * 1e3, "gloo_cpu_ms": results["gloo"] * 1e3,
                    "tpu_busbw_gbps": size * factor / results["tpu"] / 1e9,
                    "gloo_cpu_busbw_gbps": size * factor / results["gloo"] / 1e9,
                    "tpu_over_gloo": results["tpu"] / results["gloo"],
                    "staging_d2h_ms": d2h * 1e3, "staging_h2d_ms": h2d * 1e3,
                }), flush=True)
        size *= 4
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-mib", type=int, default=64)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--store", default="")
    args = parser.parse_args()
    if os.environ.get("RANK") is not None and args.store:
        _rank(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = []
        for r in range(args.world):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.world),
                       TORCHTPU_CPU_DEVICE_COUNT="1", GLOO_SOCKET_IFNAME="lo")
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--store", store, "--max-mib", str(args.max_mib),
                 "--iters", str(args.iters), "--world", str(args.world)], env=env))
        rc = 0
        try:
            for p in procs:
                rc = p.wait(timeout=1800) or rc
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        sys.exit(rc)


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    main()
