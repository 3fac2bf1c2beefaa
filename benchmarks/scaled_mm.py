"""torch._scaled_mm (float8 operands, per-tensor scales, bf16 result) on tpu against the CPU's
torch._scaled_mm and against a bf16 matmul on the same device, in one process.

Prints one JSON object per line: per size and case the median wall time of one call in steady
state (a sync closes each timed batch; first calls and compiles are left out, the first call is
reported apart), then ratios: tpu scaled_mm / CPU scaled_mm (the baseline) and tpu scaled_mm /
tpu bf16 mm. On XLA:CPU the f8 dot is widened by XLA's CPU backend, so the second ratio says
what the fp8 path costs there, not what an fp8 MXU or Hopper GEMM gains.
"""

import argparse
import json
import time

import torch

import torchtpu
from timing import median_call_time


def cases(device, n):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(torch.float8_e4m3fn).to(device)
    b = torch.randn(n, n, generator=g).to(torch.float8_e4m3fn).to(device).t()
    sa = torch.tensor(0.5).to(device)
    sb = torch.tensor(2.0).to(device)
    x = torch.randn(n, n, generator=g).to(torch.bfloat16).to(device)
    y = torch.randn(n, n, generator=g).to(torch.bfloat16).to(device)
    return {
        "scaled_mm_f8_bf16": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
        "mm_bf16": lambda: x @ y,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="256,512,1024")
    args = p.parse_args()
    sync = {"cpu": lambda: None, "tpu": torch.tpu.synchronize}
    for n in (int(s) for s in args.sizes.split(",")):
        reps = max(2, int(2e8 / n**3))
        t = {}
        for device in ("cpu", "tpu"):
            for name, fn in cases(device, n).items():
                start = time.perf_counter()
                fn()
                sync[device]()
                first_ms = (time.perf_counter() - start) * 1e3
                t[(name, device)] = median_call_time(fn, sync[device], reps, batches=7, scale=1e3)
                print(json.dumps({"case": name, "device": device, "n": n,
                                  "first_call_ms": round(first_ms, 2),
                                  "median_ms": round(t[(name, device)], 3)}))
        print(json.dumps({"n": n, "ratio": "tpu scaled_mm / cpu scaled_mm",
                          "value": round(t[("scaled_mm_f8_bf16", "tpu")] /
                                         t[("scaled_mm_f8_bf16", "cpu")], 2)}))
        print(json.dumps({"n": n, "ratio": "tpu scaled_mm / tpu bf16 mm",
                          "value": round(t[("scaled_mm_f8_bf16", "tpu")] /
                                         t[("mm_bf16", "tpu")], 2)}))
    m = torchtpu.metrics()
    print(json.dumps({"platform": torchtpu._C._platform(),
                      "programs_compiled": m["programs_compiled"],
                      "cpu_fallbacks": m["cpu_fallbacks_by_op"]}))


if __name__ == "__main__":
    main()
