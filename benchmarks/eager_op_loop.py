"""One tiny eager op in a long loop, tpu and PyTorch's CPU in one process: wall AND process CPU
time per call, for A/B-ing hot-path changes (benchmarks/ab_builds.py) on a loaded host.

    python benchmarks/eager_op_loop.py [--ops add_1elem,mul_python_scalar] [--calls 300000]

A busy 2-core host swings wall time by +-15% or more, while the process's CPU time per call
moves a few percent at most: a cut worth 3% shows in cpu_us where median_us hides it. tpu ops are
asynchronous: a synchronize every 200 calls keeps the queue short, as eager_overhead.py's batches
do. One JSON line per (op, device) and one tpu/cpu ratio line per op (wall and CPU time). The ops,
the one-thread CPU baseline and the first line (settings, load) are eager_overhead.py's.
"""

import argparse
import json
import time

# Before torch: eager_overhead sets the BLAS thread variables, then loads torch and torchtpu.
from eager_overhead import SYNC, cases, start_run


def loop(fn, sync, calls):
    for _ in range(1000):
        fn()
    sync()
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(calls):
        fn()
        if i % 200 == 199:
            sync()
    sync()
    return ((time.perf_counter() - wall) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", default="add_1elem,mul_python_scalar")
    p.add_argument("--calls", type=int, default=300000)
    args = p.parse_args()
    start_run()
    res = {}
    for device in ("cpu", "tpu"):
        fns = cases(device)
        for op in args.ops.split(","):
            wall, cpu = loop(fns[op], SYNC[device], args.calls)
            res[(op, device)] = (wall, cpu)
            print(json.dumps({"op": op, "device": device, "calls": args.calls,
                              "wall_us": round(wall, 3), "cpu_us": round(cpu, 3)}))
    for op in args.ops.split(","):
        (tw, tc), (cw, cc) = res[(op, "tpu")], res[(op, "cpu")]
        print(json.dumps({"op": op, "device": "tpu/cpu", "ratio": round(tw / cw, 2),
                          "cpu_time_ratio": round(tc / cc, 2)}))


if __name__ == "__main__":
    main()
