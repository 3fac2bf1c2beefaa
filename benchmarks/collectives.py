"""Bus bandwidth of all_reduce / all_gather / reduce_scatter on 2 ranks: the "tpu" backend on
tpu tensors vs torch's gloo backend on CPU tensors (the baseline, measured in the same
processes, calls interleaved), 4 KiB..64 MiB, plus where the tpu calls spend their time (the
backend's staging counters: device->host copies, waiting for gloo, copies back). One JSON object
per line, printed by rank 0.

    .venv/bin/python benchmarks/collectives.py [--min-kib 4] [--max-mib 64] [--iters 9]

With --threads, the ranks are threads of one process (torchtpu.testing.run_ranks_in_threads),
each on its own device of one PJRT client, and three transports run interleaved in the same run:
the tpu backend's collectives inside XLA programs ("xla"), the tpu backend staging through the
host over gloo (a group made under TORCHTPU_COLLECTIVES=host: "host_staged"), and gloo on CPU
tensors ("gloo_cpu", the baseline). One line per (op, size) from rank 0, with the load average.

    .venv/bin/python benchmarks/collectives.py --threads --world 4 [--max-mib 64]

Bus bandwidth follows nccl-tests: all_reduce moves 2(n-1)/n of the buffer per rank, all_gather
and reduce_scatter (n-1)/n of the full (gathered) buffer. Time is the median of --iters calls,
each one complete (Work waited; for tpu the result is back in the tpu tensor).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time

import ranks


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _rank(args) -> None:
    import torch
    import torch.distributed as dist

    import torchtpu.distributed as tdist

    rank, world, dev, gloo = ranks.join(args.store, timeout_s=120)
    size = args.min_kib * 1024
    while size <= args.max_mib * 1024 * 1024:
        n = size // 4  # float32 elements of the full buffer
        for op in args.ops.split(","):
            runs = {}
            for backend in ("tpu", "gloo"):
                d = dev if backend == "tpu" else torch.device("cpu")
                group = None if backend == "tpu" else gloo
                full = torch.ones(n, device=d)
                shard = torch.ones(n // world, device=d)
                if op == "all_reduce":
                    def run(full=full, group=group):
                        dist.all_reduce(full, group=group)
                elif op == "all_gather":
                    def run(full=full, shard=shard, group=group):
                        dist.all_gather_into_tensor(full, shard, group=group)
                else:
                    def run(full=full, shard=shard, group=group):
                        dist.reduce_scatter_tensor(shard, full, group=group)
                run()  # warm-up: connections, program compiles, staging buffers
                runs[backend] = run
            # Interleaved (tpu, gloo, gloo, tpu, ...), each call after a CPU barrier, so that a
            # busy host slows both alike and no call includes waiting for the other rank.
            times = {"tpu": [], "gloo": []}
            before = tdist._staging_stats()
            for i in range(args.iters):
                for backend in (("tpu", "gloo") if i % 2 == 0 else ("gloo", "tpu")):
                    dist.barrier(group=gloo)
                    times[backend].append(_timed(runs[backend]))
            after = tdist._staging_stats()
            tpu, gl = statistics.median(times["tpu"]), statistics.median(times["gloo"])
            calls = max(1, after["collectives"] - before["collectives"])

            def per_call_ms(key):
                return (after[key] - before[key]) / calls / 1e6

            factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
            if rank == 0:
                print(json.dumps({
                    "op": op, "bytes": size, "ranks": world, "iters": args.iters,
                    "tpu_ms": tpu * 1e3, "gloo_cpu_ms": gl * 1e3,
                    "tpu_busbw_gbps": size * factor / tpu / 1e9,
                    "gloo_cpu_busbw_gbps": size * factor / gl / 1e9,
                    "tpu_over_gloo": tpu / gl,
                    # Means per tpu call, from the backend's own counters: device->host copies
                    # (caller), waiting for gloo, copies back (completion thread).
                    "staging_to_host_ms": per_call_ms("to_host_ns"),
                    "staging_host_wait_ms": per_call_ms("host_wait_ns"),
                    "staging_to_device_ms": per_call_ms("to_device_ns"),
                    "variant": args.variant,
                }), flush=True)
        size *= 4
    dist.destroy_process_group()


def _thread_rank(rank: int, args, barrier) -> None:
    """One thread rank of --threads: xla vs host-staged vs gloo on CPU tensors, interleaved."""
    import torch
    import torch.distributed as dist

    import torchtpu
    import torchtpu.distributed as tdist

    world = args.world
    dev = torch.device("tpu", rank)
    # A second tpu group that stages through the host: the transport is chosen when a group is
    # made, from TORCHTPU_COLLECTIVES (one environment for all thread ranks: set around it).
    barrier.wait()
    if rank == 0:
        os.environ["TORCHTPU_COLLECTIVES"] = "host"
    barrier.wait()
    staged = dist.new_group(backend="tpu")
    barrier.wait()
    if rank == 0:
        del os.environ["TORCHTPU_COLLECTIVES"]
    gloo = dist.new_group(backend="gloo")
    transports = {"xla": (None, dev), "host_staged": (staged, dev),
                  "gloo_cpu": (gloo, torch.device("cpu"))}
    assert tdist.transport()[0] == "xla", tdist.transport()
    assert tdist.transport(staged)[0] == "gloo", tdist.transport(staged)
    size = args.min_kib * 1024
    while size <= args.max_mib * 1024 * 1024:
        n = size // 4  # float32 elements of the full buffer
        for op in args.ops.split(","):
            runs = {}
            for name, (group, d) in transports.items():
                full = torch.ones(n, device=d)
                shard = torch.ones(n // world, device=d)
                if op == "all_reduce":
                    def call(full=full, group=group):
                        dist.all_reduce(full, group=group)
                elif op == "all_gather":
                    def call(full=full, shard=shard, group=group):
                        dist.all_gather_into_tensor(full, shard, group=group)
                else:
                    def call(full=full, shard=shard, group=group):
                        dist.reduce_scatter_tensor(shard, full, group=group)

                def run(call=call, d=d):
                    call()
                    if d.type == "tpu":  # complete: the result is in the tpu tensor
                        torch.tpu.synchronize(d)

                run()  # warm-up: program compiles, connections, staging buffers
                runs[name] = run
            names = list(runs)
            times = {name: [] for name in names}
            in_program = torchtpu.metrics()["collectives_in_program"]
            for i in range(args.iters):
                order = names[i % len(names):] + names[:i % len(names)]  # rotated each round
                for name in order:
                    barrier.wait()  # every rank starts together; no call waits for a late rank
                    times[name].append(_timed(runs[name]))
            barrier.wait()
            ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
            factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
            if rank == 0:
                print(json.dumps({
                    "op": op, "bytes": size, "ranks": world, "ranks_are": "threads",
                    "iters": args.iters,
                    **{f"{name}_ms": v for name, v in ms.items()},
                    **{f"{name}_busbw_gbps": size * factor / (v / 1e3) / 1e9
                       for name, v in ms.items()},
                    "xla_over_host_staged": ms["xla"] / ms["host_staged"],
                    "xla_over_gloo_cpu": ms["xla"] / ms["gloo_cpu"],
                    "host_staged_over_gloo_cpu": ms["host_staged"] / ms["gloo_cpu"],
                    "programs_per_xla_call": 1,
                    "collectives_in_program_all_ranks":
                        torchtpu.metrics()["collectives_in_program"] - in_program,
                    "load_1min": os.getloadavg()[0],
                    "variant": args.variant,
                }), flush=True)
        size *= 4


def _threads(args) -> None:
    import threading

    os.environ.setdefault("TORCHTPU_CPU_DEVICE_COUNT", str(args.world))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torchtpu.testing

    barrier = threading.Barrier(args.world)
    torchtpu.testing.run_ranks_in_threads(lambda rank: _thread_rank(rank, args, barrier),
                                          args.world)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-kib", type=int, default=4)
    parser.add_argument("--max-mib", type=int, default=64)
    parser.add_argument("--iters", type=int, default=9)
    parser.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter")
    parser.add_argument("--variant", default="", help="a label stored in each line")
    ranks.add_arguments(parser)
    parser.add_argument("--threads", action="store_true",
                        help="ranks as threads of one process: xla vs host-staged vs gloo")
    args = parser.parse_args()
    if args.threads:
        _threads(args)
        return
    if ranks.is_rank(args):
        _rank(args)
        return
    ranks.launch(__file__, args.world, [
        "--min-kib", str(args.min_kib), "--max-mib", str(args.max_mib), "--iters", str(args.iters),
        "--ops", args.ops, "--variant", args.variant])


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    main()
