"""How the number of XLA:CPU devices (TORCHTPU_CPU_DEVICE_COUNT) and XLA's intra-op threading
affect single-device work: small eager ops, a compiled MLP train step and a compiled 256x256
matmul chain (both torchtpu.compile_step), in each configuration below, every run in its own
process, the configurations interleaved over several rounds so machine noise hits them alike.

Configurations: 1 device; 4 devices; 1 device with XLA's multi-threaded Eigen kernels off
(XLA_FLAGS=--xla_cpu_multi_thread_eigen=false).

One JSON object per line: {"workload", "config", "median_ms", "rounds_ms", "ratio_to_1_device"};
the median over rounds of each round's median step time, the 1-device configuration the baseline.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch


def eager_small(steps):
    x = torch.randn(64, 64, device="tpu")
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        y = x
        for _ in range(20):
            y = (y * 0.5 + x).tanh()
        torch.tpu.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def compiled_mlp(steps):
    import torchtpu

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 8)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-3, device="tpu"))
    x = torch.randn(32, 64, device="tpu")
    y = torch.randn(32, 8, device="tpu")

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    compiled = torchtpu.compile_step(step, model, opt)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        compiled(x, y)
        torch.tpu.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def compiled_matmul(steps):
    import torchtpu

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).to("tpu")
    x = torch.randn(256, 256, device="tpu")
    compiled = torchtpu.compile_step(lambda x: model(x).tanh(), model)
    times = []
    with torch.no_grad():
        for _ in range(steps):
            start = time.perf_counter()
            compiled(x)
            torch.tpu.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    return times


WORKLOADS = {"eager_small_ops": eager_small, "compile_step_mlp": compiled_mlp,
             "compile_step_matmul256": compiled_matmul}
CONFIGS = {"1_device": {"TORCHTPU_CPU_DEVICE_COUNT": "1"},
           "4_devices": {"TORCHTPU_CPU_DEVICE_COUNT": "4"},
           "1_device_single_thread_eigen": {"TORCHTPU_CPU_DEVICE_COUNT": "1",
                                            "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--child", metavar="WORKLOAD")
    args = p.parse_args()
    if args.child:
        import torchtpu  # noqa: F401

        times = WORKLOADS[args.child](args.steps)
        print(json.dumps(statistics.median(times[3:])))
        return
    print(json.dumps({"host": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]}}),
          flush=True)
    for workload in WORKLOADS:
        results = {c: [] for c in CONFIGS}
        for _ in range(args.rounds):
            for config, extra in CONFIGS.items():
                env = dict(os.environ, **extra)
                r = subprocess.run([sys.executable, __file__, "--steps", str(args.steps),
                                    "--child", workload], env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    print(json.dumps({"workload": workload, "config": config,
                                      "error": r.stderr[-400:]}), flush=True)
                    continue
                results[config].append(json.loads(r.stdout.strip().splitlines()[-1]))
        base = statistics.median(results["1_device"]) if results["1_device"] else None
        for config, vals in results.items():
            if not vals:
                continue
            med = statistics.median(vals)
            print(json.dumps({"workload": workload, "config": config, "median_ms": round(med, 3),
                              "rounds_ms": [round(v, 3) for v in vals],
                              "ratio_to_1_device": round(med / base, 3) if base else None}),
                  flush=True)


if __name__ == "__main__":
    main()
