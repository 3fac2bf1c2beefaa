"""A dynamic graph's specialization (torchtpu._dynamo._concrete_values, run at its first call per
signature) walks the graph's nodes itself since issue 32 instead of torch.fx.Interpreter (which
swapped torch.fx.traceback's process-global node meta under other threads' joint traces). Is the
walk any slower? Times both on one AOTAutograd-made backward graph, rounds interleaved, and prints
one JSON line per round and the new/Interpreter ratio (no device work: fake tensors only).

    .venv/bin/python benchmarks/concrete_values.py [--rounds 5] [--reps 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.fx
from torch._functorch.aot_autograd import aot_function
from torch._functorch.partitioners import default_partition
from torch._subclasses.fake_tensor import FakeTensorMode

import torchtpu  # noqa: F401
from torchtpu import _dynamo


def interpreter_values(gm, args):  # what _concrete_values did before
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            values[n] = out = super().run_node(n)
            return out

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        Recorder(gm).run(*[mode.from_tensor(a) for a in args])
    return values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=50)
    opts = ap.parse_args()
    graphs = []

    def keep(gm, _):
        graphs.append(gm)
        return gm

    f = lambda x, w: (torch.tanh(x @ w) * 2 - w.sum(0)).softmax(-1).sum()  # noqa: E731
    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
    aot_function(f, fw_compiler=keep, bw_compiler=keep, partition_fn=default_partition)(x, w).backward()
    bw = graphs[-1]
    args = [torch.randn(tuple(n.meta["val"].shape), dtype=n.meta["val"].dtype)
            for n in bw.graph.nodes if n.op == "placeholder"]
    ratios = []
    for r in range(opts.rounds):
        t = {}
        for name, fn in (("interpreter", interpreter_values), ("walk", _dynamo._concrete_values)):
            t0 = time.perf_counter()
            for _ in range(opts.reps):
                fn(bw, args)
            t[name] = (time.perf_counter() - t0) / opts.reps
        ratios.append(t["walk"] / t["interpreter"])
        print(json.dumps({"round": r, "nodes": len(bw.graph.nodes), "interpreter_s": t["interpreter"],
                          "walk_s": t["walk"], "ratio_walk_over_interpreter": ratios[-1],
                          "load": os.getloadavg()[0], "programs": 0}))
    print(json.dumps({"median_ratio_walk_over_interpreter": statistics.median(ratios)}))


if __name__ == "__main__":
    main()
