"""Cost of the device-side index checks on a small train step: checks on vs off.

A tiny language-model step (embedding, two linear layers, cross_entropy, AdamW) indexes in the
embedding lookup, its backward and the loss, so its programs carry check flags. The same step
runs with TORCHTPU_INDEX_CHECKS=1 and =0, eager and torch.compile(backend="tpu"), each in a
fresh process (the setting is read once per process), reading the loss with .item() every
step as a training loop does (that sync reads the flags). PyTorch CPU eager runs the same step
in the same command as the baseline.

Prints one JSON object per line: per (mode, checks) the first step and the median steady step;
then the ratio checks-on / checks-off per mode.

    .venv/bin/python benchmarks/index_checks.py [--steps 60]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VOCAB, DIM, BATCH, SEQ = 1000, 64, 8, 32


def step_fn(device):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    emb = torch.nn.Embedding(VOCAB, DIM).to(device)
    l1 = torch.nn.Linear(DIM, DIM).to(device)
    l2 = torch.nn.Linear(DIM, VOCAB).to(device)
    params = list(emb.parameters()) + list(l1.parameters()) + list(l2.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)

    def loss_of(tokens, targets):
        h = torch.relu(l1(emb(tokens)))
        return F.cross_entropy(l2(h).view(-1, VOCAB), targets.view(-1))

    return loss_of, opt


def run(mode, device, steps):
    import torch

    if device == "tpu":
        import torchtpu  # noqa: F401
    loss_of, opt = step_fn(device)
    if mode == "compiled":
        loss_of = torch.compile(loss_of, backend="tpu")
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, VOCAB, (BATCH, SEQ), generator=g).to(device),
                torch.randint(0, VOCAB, (BATCH, SEQ), generator=g).to(device)) for _ in range(4)]
    times = []
    for i in range(steps):
        tokens, targets = batches[i % len(batches)]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(tokens, targets)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - start)
    return {"first_s": round(times[0], 3),
            "steady_ms": round(statistics.median(times[len(times) // 2:]) * 1e3, 3)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--child", nargs=3, metavar=("MODE", "DEVICE", "CHECKS"))
    args = parser.parse_args()
    if args.child:
        mode, device, checks = args.child
        r = run(mode, device, args.steps)
        print("RESULT " + json.dumps(r))
        return
    results = {}
    configs = [("eager", "cpu", "-")]
    for mode in ("eager", "compiled"):
        for checks in ("1", "0"):
            configs.append((mode, "tpu", checks))
    for mode, device, checks in configs:
        env = dict(os.environ, TORCHTPU_INDEX_CHECKS=checks if checks != "-" else "1")
        out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child",
                              mode, device, checks], env=env, capture_output=True, text=True,
                             check=True).stdout
        r = json.loads(out.split("RESULT ")[1].splitlines()[0])
        results[(mode, device, checks)] = r
        print(json.dumps({"bench": "index_checks", "mode": mode, "device": device,
                          "checks": {"1": "on", "0": "off", "-": "n/a"}[checks], **r}), flush=True)
    cpu = results[("eager", "cpu", "-")]["steady_ms"]
    for mode in ("eager", "compiled"):
        on = results[(mode, "tpu", "1")]["steady_ms"]
        off = results[(mode, "tpu", "0")]["steady_ms"]
        print(json.dumps({"bench": "index_checks", "mode": mode,
                          "ratio_checks_on_over_off": round(on / off, 3),
                          "ratio_off_over_cpu_eager": round(off / cpu, 3)}))


if __name__ == "__main__":
    main()
