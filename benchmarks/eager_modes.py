"""Strict eager vs fused eager (issue 27) on a tiny Transformers LlamaForCausalLM (random weights,
the config of compile_step.py): the full train step (forward, backward, clipping, AdamW), the same
step with the model under torch.compile(backend="tpu") and the optimizer left eager (as most
scripts do), greedy generate() of new tokens with the dynamic cache, and the tests' small CNN
(tests/python/test_cnn_training.py: conv, batch norm, max pool, dropout, linear; SGD with
momentum). CPU eager runs each workload in the same process as the baseline; the Llama train
workloads also run torchtpu.compile_step (the whole step as one program) as the compiled
reference. torchax's jax.jit is in benchmarks/compile_step.py (when torchax is installed).

Modes are interleaved round by round (strict, fused, ..., strict, fused...), each with its own
model copy, so a busy host slows them alike; report the ratios. One JSON object per line, after a
line naming the host and its load:

  {"workload", "mode", "median_ms" (per step, median over rounds of `--steps` steps closed by
   one sync), "first_ms", "programs_per_step" (program executions per steady step, the sync's
   included), "builds_per_step" (program-cache misses per steady step), "ratio_to_strict",
   "ratio_to_compile_step", "ratio_to_cpu_eager", "max_abs_loss_diff_to_strict" |
   "tokens_equal_strict", "builds_per_new_token"}

    python benchmarks/eager_modes.py [--steps 6] [--rounds 3] [--tokens 32] [--workloads ...]
"""

import argparse
import json
import os
import statistics
import time

import torch

import torchtpu

# Untimed steps after the first two, so every program a step launches has run
# TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER (8) times before the timed ones.
WARM_STEPS = 8
WORKLOADS = ("train", "train-compiled-model", "cnn-train", "generate")


def build(device, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                      max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).to(device)
    ids = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(1)).to(device)
    return model, ids


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def counters():
    m = torchtpu.metrics()
    return m["executions"], m["cache_misses"]


def build_cnn(device):
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "python"))
    from test_cnn_training import SmallCNN, synthetic_data

    torch.manual_seed(0)
    model = SmallCNN().to(device)
    images, labels = synthetic_data()
    return model, (images[:16].to(device), labels[:16].to(device))


def _llama_step(model, opt, ids):
    opt.zero_grad(set_to_none=False)
    loss = model(ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.detach()


class Contender:
    """One mode's model, optimizer and step; runs `n` steps in its eager mode. Modes: strict,
    fused (eager modes), compile-step (torchtpu.compile_step of the whole step, strict eager
    around it), cpu-eager."""

    def __init__(self, workload, mode, device):
        self.workload, self.mode, self.device = workload, mode, device
        self.losses, self.times, self.first = [], [], None
        self.programs, self.builds, self.steps = 0, 0, 0
        if workload == "cnn-train":
            self.model, (self.x, self.y) = build_cnn(device)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
            return
        self.model, self.ids = build(device)
        lr = torch.tensor(1e-3, device=device) if device != "cpu" else 1e-3
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, foreach=True,
                                     capturable=device != "cpu")
        self.forward = self.model
        if workload == "train-compiled-model" and mode in ("strict", "fused"):
            self.forward = torch.compile(self.model, backend="tpu")
        if mode == "compile-step":
            opt = self.opt
            self.compiled = torchtpu.compile_step(lambda m, ids: _llama_step(m, opt, ids),
                                                  self.model, self.opt)

    def step(self):
        if self.workload == "cnn-train":
            loss = torch.nn.functional.cross_entropy(self.model(self.x), self.y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            return loss.detach()
        if self.mode == "compile-step":
            return self.compiled(self.model, self.ids)
        self.opt.zero_grad(set_to_none=False)
        loss = self.forward(self.ids, labels=self.ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return loss.detach()

    def run(self, n):
        """The first two calls alone (they compile); then `n` steps timed as one batch closed by
        one sync, as a training loop runs them (a sync per step would add a cut a real loop
        lacks)."""
        torchtpu.set_eager_mode("fused" if self.mode == "fused" else "strict")
        # Each contender's random ops (the CNN's dropout) draw from the shared generator: seeded
        # by the step count, every mode draws the same masks at the same step.
        torch.manual_seed(len(self.losses))
        try:
            if self.first is None:
                start = time.perf_counter()
                self.losses.append(self.step())
                sync(self.device)
                self.first = (time.perf_counter() - start) * 1e3
                # The second step is a new path too (grads and optimizer state exist: zero_ and
                # add_ into kept .grad, strict eager's ~7 new programs); not a steady step.
                self.losses.append(self.step())
                sync(self.device)
                # Steady state: hot ops' light programs (TORCHTPU_LIGHT_COMPILE) upgraded to
                # full effort, which a long loop reaches a second after its last compile.
                for _ in range(WARM_STEPS):
                    self.losses.append(self.step())
                sync(self.device)
                if self.device == "tpu":
                    torchtpu.finish_background_compiles()
            e0, b0 = counters()
            start = time.perf_counter()
            for _ in range(n):
                self.losses.append(self.step())
            sync(self.device)
            self.times.append((time.perf_counter() - start) * 1e3 / n)
            e1, b1 = counters()
            if self.device == "tpu":
                self.programs += e1 - e0
                self.builds += b1 - b0
            self.steps += n
        finally:
            torchtpu.set_eager_mode("strict")


def bench_train(workload, args, load):
    modes = [("strict", "tpu"), ("fused", "tpu"), ("cpu-eager", "cpu")]
    if workload != "cnn-train" and not args.no_compile_step:
        modes.insert(2, ("compile-step", "tpu"))
    cs = {m: Contender(workload, m, d) for m, d in modes}
    for _ in range(args.rounds):
        for m, _d in modes:
            cs[m].run(args.steps)
    strict = cs["strict"]
    strict_losses = torch.stack(strict.losses).cpu()
    cpu_ms = statistics.median(cs["cpu-eager"].times)
    out = []
    for m, _d in modes:
        c = cs[m]
        med = statistics.median(c.times)
        row = {"workload": workload, "mode": m, "median_ms": round(med, 2),
               "first_ms": round(c.first, 1), "steps": len(c.losses),
               "ratio_to_strict": round(med / statistics.median(strict.times), 3),
               "ratio_to_cpu_eager": round(med / cpu_ms, 3),
               **({"ratio_to_compile_step":
                   round(med / statistics.median(cs["compile-step"].times), 3)}
                  if "compile-step" in cs else {}),
               "max_abs_loss_diff_to_strict":
                   float((torch.stack(c.losses).cpu().float() - strict_losses).abs().max()),
               "load": load}
        if c.device == "tpu":
            row["programs_per_step"] = round(c.programs / c.steps, 2)
            row["builds_per_step"] = round(c.builds / c.steps, 2)
        out.append(row)
    return out


def bench_generate(args, load):
    rows, tokens, times = [], {}, {"strict": [], "fused": [], "cpu-eager": []}
    models = {"strict": build("tpu"), "fused": build("tpu"), "cpu-eager": build("cpu")}
    prompt = models["cpu-eager"][1][:1, :8]
    builds = {"strict": [], "fused": []}
    programs = {"strict": 0, "fused": 0}
    for _ in range(args.rounds):
        for mode, (model, _ids) in models.items():
            device = "cpu" if mode == "cpu-eager" else "tpu"
            torchtpu.set_eager_mode("fused" if mode == "fused" else "strict")
            try:
                e0, b0 = counters()
                start = time.perf_counter()
                with torch.no_grad():
                    out = model.generate(prompt.to(device), max_new_tokens=args.tokens,
                                         min_new_tokens=args.tokens, do_sample=False,
                                         pad_token_id=0)
                sync(device)
                times[mode].append((time.perf_counter() - start) * 1e3)
                e1, b1 = counters()
            finally:
                torchtpu.set_eager_mode("strict")
            tokens[mode] = out.cpu()
            if device == "tpu":
                # The first round compiles; the later ones show the steady state (hot ops'
                # light programs upgraded to full effort after it: TORCHTPU_LIGHT_COMPILE).
                builds[mode].append(b1 - b0)
                programs[mode] = e1 - e0
                torchtpu.finish_background_compiles()
    for mode in times:
        med = statistics.median(times[mode][1:] or times[mode])
        row = {"workload": f"generate-{args.tokens}-tokens", "mode": mode,
               "median_ms": round(med, 1), "first_ms": round(times[mode][0], 1),
               "ratio_to_strict": round(med / statistics.median(times["strict"][1:]
                                                                or times["strict"]), 3),
               "ratio_to_cpu_eager": round(med / statistics.median(times["cpu-eager"][1:]
                                                                   or times["cpu-eager"]), 3),
               "tokens_equal_strict": bool(torch.equal(tokens[mode], tokens["strict"])),
               "load": load}
        if mode != "cpu-eager":
            row["programs_per_token"] = round(programs[mode] / args.tokens, 2)
            # The first round compiles (strict runs first, so the op programs fused mode's churn
            # fallback shares with it are built then: compare both columns).
            row["builds_per_new_token_first_round"] = round(builds[mode][0] / args.tokens, 2)
            row["builds_per_new_token_last_round"] = round(builds[mode][-1] / args.tokens, 3)
        rows.append(row)
    m = torchtpu.metrics()
    rows.append({"workload": f"generate-{args.tokens}-tokens", "mode": "fused",
                 "fused_flushes_by_cause": m["fused_flushes_by_cause"],
                 "fused_ops_replayed": m["fused_ops_replayed"]})
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=WORKLOADS)
    p.add_argument("--no-compile-step", action="store_true",
                   help="leave torchtpu.compile_step out of the Llama train workloads")
    args = p.parse_args()
    load = os.getloadavg()[0]
    # Looked up, not imported: torchax claims the PrivateUse1 device torchtpu holds here.
    import importlib.util
    if importlib.util.find_spec("torchax") is not None:
        torchax_note = "installed (its jax.jit row: benchmarks/compile_step.py)"
    else:
        torchax_note = "not installed: no jax.jit row"
    print(json.dumps({"host": os.uname().nodename, "cpus": os.cpu_count(),
                      "load_1min": load, "torch": torch.__version__, "torchax": torchax_note}),
          flush=True)
    for w in args.workloads:
        rows = bench_generate(args, load) if w == "generate" else bench_train(w, args, load)
        for r in rows:
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
