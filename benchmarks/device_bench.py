"""What matters on an accelerator, tpu beside the baseline device in the same process (torch on
CUDA where a GPU is present, else PyTorch's CPU), one JSON object per line:

  eager     tiny-op latency (add of one element, a 64x64 matmul, a 64x64 sum), tpu vs baseline eager
  matmul    an NxN bf16 matmul (N=4096 on a GPU), TFLOP/s: tpu eager, baseline eager, baseline
            Inductor (torch.compile) -- and the card's peak when the caller names it (--peak-tflops)
  stream    a large elementwise op (y = x * 2 + 1, float32), GB/s moved: tpu, baseline, Inductor
  llama     a tiny Transformers Llama train step (forward, backward, AdamW): tpu eager,
            torch.compile(backend="tpu"), torchtpu.compile_step, baseline eager, baseline Inductor;
            first call and steady-state median, programs launched per steady step on tpu

--small runs reduced sizes (the CPU run that keeps scripts/device_check.sh working in CI). Figures
are medians of several timed batches, each closed by the device's synchronize (ops are async).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

import torchtpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_call_time  # noqa: E402


def baseline_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync_fn(device: str):
    if device == "tpu":
        return torch.tpu.synchronize
    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def bench_eager(base: str) -> None:
    for device in ("tpu", base):
        a = torch.ones(1, device=device)
        m = torch.randn(64, 64, device=device)
        cases = {"add_1elem": lambda: a + a, "matmul_64x64": lambda: m @ m,
                 "sum_64x64": lambda: m.sum()}
        for op, fn in cases.items():
            us = median_call_time(fn, sync_fn(device), reps=100, batches=9, warmup=10)
            emit(bench="eager", op=op, device=device, median_us=round(us, 2))


def timed(fn, device: str, reps: int, batches: int = 5) -> float:
    """Median seconds per call after one warm-up call (compiles stay out)."""
    return median_call_time(fn, sync_fn(device), reps=reps, batches=batches, warmup=1, scale=1.0)


def bench_matmul(base: str, n: int, peak: float | None) -> None:
    flop = 2.0 * n ** 3
    runs = [("tpu", "eager", "tpu"), (base, "eager", base), (base, "inductor", base)]
    for device, mode, where in runs:
        a = torch.randn(n, n, device=where, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=where, dtype=torch.bfloat16)
        fn = (lambda: a @ b) if mode == "eager" else torch.compile(lambda: a @ b)
        seconds = timed(fn, where, reps=3 if n >= 2048 else 10)
        tflops = flop / seconds / 1e12
        emit(bench="matmul", n=n, dtype="bfloat16", device=device, mode=mode,
             ms=round(seconds * 1e3, 3), tflops=round(tflops, 3),
             fraction_of_peak=round(tflops / peak, 3) if peak else None)


def bench_stream(base: str, numel: int, peak_gbps: float | None) -> None:
    moved = 2 * numel * 4  # read x, write y (float32)
    for device, mode in (("tpu", "eager"), (base, "eager"), (base, "inductor")):
        x = torch.randn(numel, device=device)
        fn = (lambda: x * 2 + 1) if mode == "eager" else torch.compile(lambda: x * 2 + 1)
        seconds = timed(fn, device, reps=5)
        gbps = moved / seconds / 1e9
        emit(bench="stream", numel=numel, device=device, mode=mode, ms=round(seconds * 1e3, 3),
             gbps=round(gbps, 2),
             fraction_of_peak=round(gbps / peak_gbps, 3) if peak_gbps else None)


def tiny_llama(device: str, width: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                      max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).to(device)
    lr = torch.tensor(1e-3, device=device) if device != "cpu" else 1e-3
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True, capturable=device != "cpu")
    ids = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(1)).to(device)
    return model, opt, ids


def train_step(model, opt, ids):
    opt.zero_grad(set_to_none=False)
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    return loss


def bench_llama(base: str, width: int, steps: int, runs=None) -> None:
    runs = runs or [("tpu", "eager"), ("tpu", "compiled"), ("tpu", "compile_step"),
                    (base, "eager"), (base, "inductor")]
    losses = {}
    for device, mode in runs:
        model, opt, ids = tiny_llama(device, width)
        if mode == "eager":
            step = lambda: train_step(model, opt, ids)  # noqa: E731
        elif mode == "compile_step":
            compiled_step = torchtpu.compile_step(
                lambda batch: train_step(model, opt, batch), model, opt)
            step = lambda: compiled_step(ids)  # noqa: E731
        else:
            backend = "tpu" if device == "tpu" else "inductor"
            compiled = torch.compile(model, backend=backend)
            step = lambda: train_step(compiled, opt, ids)  # noqa: E731
        sync = sync_fn(device)
        start = time.perf_counter()
        first = step()
        sync()
        first_ms = (time.perf_counter() - start) * 1e3
        times, executed = [], []
        for _ in range(steps):
            before = torchtpu.metrics()["executions"] if device == "tpu" else 0
            start = time.perf_counter()
            loss = step()
            sync()
            times.append(time.perf_counter() - start)
            if device == "tpu":
                executed.append(torchtpu.metrics()["executions"] - before)
        losses[(device, mode)] = float(first.detach().float().cpu())
        emit(bench="llama_train_step", width=width, device=device, mode=mode,
             first_ms=round(first_ms, 1), median_ms=round(statistics.median(times) * 1e3, 3),
             programs_per_step=statistics.median(executed) if executed else None,
             first_loss=round(losses[(device, mode)], 6), last_loss=float(loss.detach().cpu()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="reduced sizes (CPU runs)")
    p.add_argument("--only", default="eager,matmul,stream,llama")
    p.add_argument("--peak-tflops", type=float, default=None, help="the card's bf16 dense peak")
    p.add_argument("--peak-gbps", type=float, default=None, help="the card's memory bandwidth")
    args = p.parse_args()
    base = baseline_device()
    emit(host={"baseline": base, "tpu": torch.tpu.get_device_name(), "cpus": os.cpu_count(),
               "loadavg_1m": os.getloadavg()[0], "torch": torch.__version__,
               "small": args.small})
    only = set(args.only.split(","))
    if "eager" in only:
        bench_eager(base)
    if "matmul" in only:
        bench_matmul(base, 256 if args.small else 4096, args.peak_tflops)
    if "stream" in only:
        bench_stream(base, (1 << 20) if args.small else (1 << 28), args.peak_gbps)
    if "llama" in only:
        # The CPU run (CI) skips Inductor's train step: compiling it takes minutes on 2 cores.
        modes = None if not args.small else [("tpu", "eager"), ("tpu", "compiled"),
                                             ("tpu", "compile_step"), (base, "eager")]
        bench_llama(base, 64 if args.small else 512, 3 if args.small else 20, modes)


if __name__ == "__main__":
    main()
