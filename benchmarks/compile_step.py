"""First call vs steady state of a tiny Transformers LlamaForCausalLM (random weights, built from a
config): inference forward and the full train step (forward, backward, AdamW step), in:

  tpu-eager, tpu-compiled (cold cache), tpu-compiled-warm-cache (a fresh process reusing the disk
  cache), tpu-default-compile (torch.compile(fn) with no backend argument, which torchtpu routes
  to backend="tpu"; a fresh cache of its own), cpu-eager, cpu-inductor.

One JSON object per line: {"workload", "mode", "phase", "median_ms" | "ms", "programs_compiled"}.
The cold and warm runs use a private cache folder (torchtpu's and PyTorch's), so the numbers do not
depend on earlier runs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def build(device):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                      max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).to(device)
    lr = torch.tensor(1e-3, device=device) if device != "cpu" else 1e-3
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True,
                            capturable=device != "cpu")
    ids = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(1)).to(device)
    return model, opt, ids


def forward(model, ids):
    with torch.no_grad():
        return model(ids).logits


def train_step(model, opt, ids):
    opt.zero_grad(set_to_none=False)
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    return loss


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def measure(fn, device, steps):
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def run_mode(mode, workload, steps):
    device = "cpu" if mode.startswith("cpu") else "tpu"
    if device == "tpu":
        import torchtpu

        torchtpu.reset_metrics()
    model, opt, ids = build(device)
    if workload == "forward":
        fn = lambda m: forward(m, ids)  # noqa: E731
    else:
        fn = lambda m: train_step(m, opt, ids)  # noqa: E731
    target = model
    if mode == "cpu-inductor":
        target_fn = torch.compile(fn, backend="inductor")
    elif mode.startswith("tpu-compiled"):
        target_fn = torch.compile(fn, backend="tpu")
    elif mode == "tpu-default-compile":
        target_fn = torch.compile(fn)
    else:
        target_fn = fn
    times = measure(lambda: target_fn(target), device, steps)
    compiled = None
    if device == "tpu":
        import torchtpu

        compiled = torchtpu.metrics()["programs_compiled"]
    return times, compiled


def emit(workload, mode, times, compiled):
    first = {"workload": workload, "mode": mode, "phase": "first", "ms": round(times[0], 2)}
    steady = {"workload": workload, "mode": mode, "phase": "steady",
              "median_ms": round(statistics.median(times[2:]), 3)}
    if compiled is not None:
        first["programs_compiled"] = compiled
    print(json.dumps(first), flush=True)
    print(json.dumps(steady), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--child", nargs=2, metavar=("MODE", "WORKLOAD"))
    args = p.parse_args()
    if args.child:
        times, compiled = run_mode(args.child[0], args.child[1], args.steps)
        print(json.dumps({"times": times, "compiled": compiled}))
        return
    cache = tempfile.mkdtemp(prefix="torchtpu-bench-cache-")
    for workload in ("forward", "train_step"):
        # Every mode in its own process, so first calls are really first.
        for mode in ("cpu-eager", "cpu-inductor", "tpu-eager", "tpu-compiled",
                     "tpu-compiled-warm-cache", "tpu-default-compile"):
            # tpu-eager gets its own cache, so "tpu-compiled" is a genuinely cold process and
            # "tpu-compiled-warm-cache" is a restart that reuses what that process compiled.
            own_cache = mode in ("tpu-eager", "tpu-default-compile")
            env = dict(os.environ, TORCHTPU_CACHE_DIR=tempfile.mkdtemp() if own_cache else cache)
            # PyTorch's own caches (AOTAutograd's, Inductor's) are private too: cold means cold.
            env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
                cache if mode.startswith("tpu-compiled") else tempfile.mkdtemp(), "torch")
            r = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child",
                                mode, workload], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                print(json.dumps({"workload": workload, "mode": mode, "error": r.stderr[-500:]}))
                continue
            data = json.loads(r.stdout.strip().splitlines()[-1])
            emit(workload, mode, data["times"], data["compiled"])


if __name__ == "__main__":
    main()
