"""Three ways to run one training step of a small Transformer on tpu, and what each launches:

  eager                      one XLA program per op (hundreds per step), nothing to compile ahead
  torch.compile(model)       forward and backward one program each; the optimizer step, outside
                             the compiled model as in most scripts, still runs op by op
  torchtpu.compile_step(...) forward, backward and the optimizer step as ONE program per step

    python examples/compile_train_step.py [--steps 6]

All three give the CPU's losses. Programs per step come from torchtpu.metrics()["executions"].
"""

import argparse
import copy
import time

import torch
import torch.nn as nn

import torchtpu


def make_model() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0,
                                       batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, num_layers=2), nn.Linear(64, 8))


def step_fn(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x).mean(dim=1), y)
    loss.backward()
    opt.step()
    return loss


def run(mode: str, base: nn.Module, data, steps: int):
    model = copy.deepcopy(base).to("tpu")
    # A tensor learning rate and capturable=True: a changing lr never recompiles.
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-3, device="tpu"),
                            capturable=True)
    if mode == "eager":
        step = lambda x, y: step_fn(model, opt, x, y)  # noqa: E731
    elif mode == "torch.compile":
        compiled = torch.compile(model, backend="tpu")
        step = lambda x, y: step_fn(compiled, opt, x, y)  # noqa: E731
    else:
        step = torchtpu.compile_step(lambda x, y: step_fn(model, opt, x, y), model, opt)
    losses, programs, times = [], [], []
    for i in range(steps):
        x, y = (t.to("tpu") for t in data[i % len(data)])
        before = torchtpu.metrics()["executions"]
        start = time.perf_counter()
        losses.append(step(x, y).item())
        times.append(time.perf_counter() - start)
        programs.append(torchtpu.metrics()["executions"] - before)
    return losses, programs, times


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    base = make_model()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 16, 64, generator=g), torch.randint(0, 8, (4,), generator=g))
            for _ in range(3)]

    cpu = copy.deepcopy(base)
    cpu_opt = torch.optim.AdamW(cpu.parameters(), lr=1e-3)
    cpu_losses = [step_fn(cpu, cpu_opt, *data[i % len(data)]).item() for i in range(args.steps)]

    for mode in ("eager", "torch.compile", "compile_step"):
        losses, programs, times = run(mode, base, data, args.steps)
        worst = max(abs(a - b) for a, b in zip(losses, cpu_losses))
        print(f"{mode:14s} programs/step {programs[-1]:4d}  first step {times[0]:6.2f} s  "
              f"last step {times[-1] * 1e3:7.1f} ms  max |loss - cpu| {worst:.1e}")
        assert worst < 1e-4, (mode, losses, cpu_losses)


if __name__ == "__main__":
    main()
