"""Cost of the device-side index checks on a train step: checks on vs off.

Two models: a tiny language-model step (embedding, two linear layers, cross_entropy, AdamW) and
a tiny Transformers Llama (LlamaForCausalLM from a config, AdamW). Both index in the embedding
lookup, its backward and the loss, so their programs carry check flags. The same step runs with
TORCHTPU_INDEX_CHECKS=1 and =0, eager and torch.compile(backend="tpu"), each in a fresh process
(the setting is read once per process), reading the loss with .item() every step as a training
loop does (that sync reads the flags). PyTorch CPU eager runs the same step in the same command
as the baseline. --rounds N repeats the whole set of configurations N times, interleaved, so a
busy host slows on and off alike; the ratios use the median over rounds.

Prints one JSON object per line: per (model, mode, checks, round) the first step and the median
steady step; then the ratio checks-on / checks-off per model and mode.

    .venv/bin/python benchmarks/index_checks.py [--model lm|llama|both] [--steps 60] [--rounds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VOCAB, DIM, BATCH, SEQ = 1000, 64, 8, 32


def llama_step_fn(device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=DIM, intermediate_size=2 * DIM,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=SEQ, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

    def loss_of(tokens, targets):
        return model(input_ids=tokens, labels=targets).loss

    return loss_of, opt


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


def run(model, mode, device, steps):
    import torch

    if device == "tpu":
        import torchtpu  # noqa: F401
    torch.set_num_threads(1)  # one intra-op thread for the CPU baseline, as XLA:CPU's eager ops
    loss_of, opt = {"lm": step_fn, "llama": llama_step_fn}[model](device)
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
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--model", choices=["lm", "llama", "both"], default="both")
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "MODE", "DEVICE", "CHECKS"))
    args = parser.parse_args()
    if args.child:
        model, mode, device, checks = args.child
        r = run(model, mode, device, args.steps)
        print("RESULT " + json.dumps(r))
        return
    models = ["lm", "llama"] if args.model == "both" else [args.model]
    configs = []
    for model in models:
        configs.append((model, "eager", "cpu", "-"))
        for mode in ("eager", "compiled"):
            for checks in ("1", "0"):
                configs.append((model, mode, "tpu", checks))
    results = {c: [] for c in configs}
    for rnd in range(args.rounds):
        for model, mode, device, checks in configs:
            env = dict(os.environ, TORCHTPU_INDEX_CHECKS=checks if checks != "-" else "1")
            out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child",
                                  model, mode, device, checks], env=env, capture_output=True,
                                 text=True, check=True).stdout
            r = json.loads(out.split("RESULT ")[1].splitlines()[0])
            results[(model, mode, device, checks)].append(r["steady_ms"])
            print(json.dumps({"bench": "index_checks", "model": model, "mode": mode,
                              "device": device, "round": rnd,
                              "checks": {"1": "on", "0": "off", "-": "n/a"}[checks], **r}),
                  flush=True)
    med = {c: statistics.median(v) for c, v in results.items()}
    for model in models:
        cpu = med[(model, "eager", "cpu", "-")]
        for mode in ("eager", "compiled"):
            on = med[(model, mode, "tpu", "1")]
            off = med[(model, mode, "tpu", "0")]
            per_round = [round(a / b, 3) for a, b in zip(results[(model, mode, "tpu", "1")],
                                                          results[(model, mode, "tpu", "0")])]
            print(json.dumps({"bench": "index_checks", "model": model, "mode": mode,
                              "rounds": args.rounds, "steady_ms_on": on, "steady_ms_off": off,
                              "ratio_checks_on_over_off": round(on / off, 3),
                              "ratio_on_over_off_by_round": per_round,
                              "ratio_off_over_cpu_eager": round(off / cpu, 3)}))


if __name__ == "__main__":
    main()
