"""Trains a small MLP classifier on the tpu device and on the CPU side by side.

Prints the loss of every step on both (they should agree), the number of programs compiled and
the time spent compiling, and the first step's time against the steady-state median.
"""

import argparse
import statistics
import time

import torch
import torch.nn as nn

import torchtpu


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(),
                         nn.Linear(64, 10))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-diff", type=float, default=None,
                        help="exit with an error if a step's loss differs from the CPU's by more")
    args = parser.parse_args()

    torch.manual_seed(0)
    cpu_model = make_model()
    tpu_model = make_model().to("tpu")
    tpu_model.load_state_dict(cpu_model.state_dict())
    opt_cpu = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    opt_tpu = torch.optim.AdamW(tpu_model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()

    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(args.batch, 32, generator=gen),
             torch.randint(0, 10, (args.batch,), generator=gen)) for _ in range(4)]

    print(f"device: {torch.tpu.get_device_name()} ({torch.tpu.device_count()} devices)")
    torchtpu.reset_metrics()
    step_times = []
    worst = 0.0
    for step in range(args.steps):
        x, y = data[step % len(data)]
        start = time.perf_counter()
        opt_tpu.zero_grad()
        loss_tpu = loss_fn(tpu_model(x.to("tpu")), y.to("tpu"))
        loss_tpu.backward()
        opt_tpu.step()
        loss_value = loss_tpu.item()  # waits for the step
        step_times.append(time.perf_counter() - start)

        opt_cpu.zero_grad()
        loss_cpu = loss_fn(cpu_model(x), y)
        loss_cpu.backward()
        opt_cpu.step()
        diff = abs(loss_value - loss_cpu.item())
        worst = max(worst, diff)
        print(f"step {step:3d}  loss tpu {loss_value:.6f}  cpu {loss_cpu.item():.6f}  "
              f"|diff| {diff:.2e}")

    m = torchtpu.metrics()
    steady = statistics.median(step_times[2:]) if len(step_times) > 2 else step_times[-1]
    print(f"programs compiled: {m['programs_compiled']} in {m['compile_seconds']:.2f} s")
    print(f"first step: {step_times[0] * 1e3:.1f} ms   steady-state step (median): "
          f"{steady * 1e3:.2f} ms")
    print(f"CPU fallbacks: {m['cpu_fallbacks']} {m['cpu_fallbacks_by_op'] or ''}")
    if args.max_diff is not None and worst > args.max_diff:
        raise SystemExit(f"a step's loss differs from the CPU's by {worst:.2e} > {args.max_diff}")


if __name__ == "__main__":
    main()
