"""vLLM offline serving on tpu (torchtpu_vllm plugin, compiled mode) against vLLM's own CPU
platform, in the same venv and run, on the same tiny random-weight Llama (head_dim 32: vLLM's CPU
attention rejects 16). JSON lines.

    .venv-vllm/bin/python benchmarks/vllm_serving.py [--rounds 3] [--prompts 4] [--tokens 32]

Each measurement is a fresh process. Round 0 starts the tpu engine from an empty program cache
(cold: its compiles and seconds are stated) and vLLM's CPU engine from an empty torch.compile
cache; rounds 1.. reuse both caches (warm), interleaving cpu and tpu runs. Per run:

- startup_s: LLM(...) construction, warm-up compiles (or cache loads) included;
- ttft_s: the first request after startup (one prompt, one token); ttft_steady_s: the median of
  5 more (distinct prompts, so no prefix-cache hit);
- decode_tokens_per_s: `prompts` requests decoding together, from the engine's step loop, over
  the steps that only decode (prefill steps excluded);
- programs_per_step / programs_per_decode_step, transfers per step, compiles_after_warmup (tpu:
  torchtpu.metrics() deltas in the worker).

The summary line has the medians of the warm rounds and their ratios to the CPU platform, with
the host's load average beside every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _prompt(i: int, n: int) -> list[int]:
    return [(7 * i + 11 * j + 3 * i * j) % 300 + 6 for j in range(n)]


def _child(args) -> None:
    from vllm import LLM, SamplingParams, TokensPrompt

    tpu = args.platform == "tpu"
    t0 = time.perf_counter()
    llm = LLM(model=args.model, dtype="float32", max_model_len=256, max_num_seqs=args.prompts,
              max_num_batched_tokens=128, seed=0)
    startup = time.perf_counter() - t0
    metrics = (lambda: llm.collective_rpc("torchtpu_metrics")[0]) if tpu else (lambda: {})
    after_startup = metrics()
    one = SamplingParams(temperature=0.0, max_tokens=1)
    t0 = time.perf_counter()
    llm.generate([TokensPrompt(prompt_token_ids=_prompt(100, 24))], one, use_tqdm=False)
    ttft = time.perf_counter() - t0
    steady = []
    for i in range(5):
        t0 = time.perf_counter()
        llm.generate([TokensPrompt(prompt_token_ids=_prompt(200 + i, 24))], one, use_tqdm=False)
        steady.append(time.perf_counter() - t0)

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    before = metrics()
    for i in range(args.prompts):
        engine.add_request(f"r{i}", TokensPrompt(prompt_token_ids=_prompt(i, 24 + i)), params)
    steps = decode_steps = 0
    decode_time = 0.0
    decode_tokens = 0
    first_tokens = {}
    while engine.has_unfinished_requests():
        prefilled = all(len(r) > 0 for r in first_tokens.values()) and len(first_tokens) == \
            args.prompts
        t0 = time.perf_counter()
        outs = engine.step()
        dt = time.perf_counter() - t0
        steps += 1
        for o in outs:
            first_tokens[o.request_id] = list(o.outputs[0].token_ids)
        if prefilled:
            decode_steps += 1
            decode_time += dt
            decode_tokens += len(outs)
    after = metrics()
    result = {
        "startup_s": round(startup, 2),
        "ttft_s": round(ttft, 4),
        "ttft_steady_s": round(statistics.median(steady), 4),
        "decode_tokens_per_s": round(decode_tokens / decode_time, 1) if decode_time else None,
        "steps": steps,
        "decode_steps": decode_steps,
        "first_tokens": [first_tokens[f"r{i}"][:4] for i in range(min(2, args.prompts))],
    }
    if tpu:
        d = {k: after[k] - before[k] for k in after if isinstance(after[k], (int, float))}
        result.update(
            programs_per_step=round(d["executions"] / steps, 2),
            h2d_per_step=round(d["h2d_transfers"] / steps, 2),
            d2h_per_step=round(d["d2h_transfers"] / steps, 2),
            compiles_after_warmup=after["cache_misses"] - after_startup["cache_misses"],
            cpu_fallbacks=after["cpu_fallbacks"],
            warmup=llm.collective_rpc("torchtpu_warmup_stats")[0],
        )
    print("RESULT " + json.dumps(result), flush=True)


def _run(model: str, platform: str, tmp: str, args) -> dict:
    env = dict(os.environ, TORCHTPU_CACHE_DIR=os.path.join(tmp, "torchtpu-cache"),
               VLLM_CACHE_ROOT=os.path.join(tmp, f"vllm-cache-{platform}"))
    env.setdefault("TORCHTPU_VLLM_KV_CACHE_BYTES", str(16 << 20))
    if platform == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        env["TORCHTPU_VLLM"] = "0"
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    cmd = [sys.executable, __file__, "--child", "--model", model, "--platform", platform,
           "--prompts", str(args.prompts), "--tokens", str(args.tokens)]
    load_before = _load()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            r["load"] = [load_before, _load()]
            return r
    raise RuntimeError(f"{platform} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def _median(runs: list[dict], key: str):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--model")
    parser.add_argument("--platform", default="tpu")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="warm rounds (after the cold one)")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return

    from torchtpu_vllm.tiny_model import make_tiny_llama

    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_llama(os.path.join(tmp, "model"), head_dim=32, num_heads=2,
                                num_kv_heads=1)
        runs: dict[str, list[dict]] = {"cpu": [], "tpu": []}
        for rnd in range(args.rounds + 1):
            order = ("cpu", "tpu") if rnd % 2 == 0 else ("tpu", "cpu")
            for platform in order:
                r = _run(model, platform, tmp, args)
                r.update(round=rnd, start="cold" if rnd == 0 else "warm",
                         platform="cpu (vLLM's own)" if platform == "cpu"
                         else "tpu (torchtpu_vllm, compiled)")
                print(json.dumps(r), flush=True)
                if rnd > 0:
                    runs[platform].append(r)
                else:
                    runs[platform + "_cold"] = [r]
        cpu, tpu = runs["cpu"], runs["tpu"]
        summary = {"summary": f"medians of {args.rounds} warm rounds, {args.prompts} prompts x "
                              f"{args.tokens} greedy tokens, tiny Llama, XLA:CPU plugin"}
        for key in ("startup_s", "ttft_s", "ttft_steady_s", "decode_tokens_per_s"):
            c, t = _median(cpu, key), _median(tpu, key)
            summary[f"cpu_{key}"] = c
            summary[f"tpu_{key}"] = t
            summary[f"{key}_vs_cpu"] = round(t / c, 3) if c and t else None
        for key in ("programs_per_step", "h2d_per_step", "d2h_per_step",
                    "compiles_after_warmup"):
            summary[f"tpu_{key}"] = _median(tpu, key)
        cold_tpu, cold_cpu = runs["tpu_cold"][0], runs["cpu_cold"][0]
        summary["tpu_cold_startup_s"] = cold_tpu["startup_s"]
        summary["tpu_cold_compiles"] = cold_tpu["warmup"]["compiled"]
        summary["tpu_cold_compile_s"] = cold_tpu["warmup"]["compile_seconds"]
        summary["tpu_warm_compiles"] = [r["warmup"]["compiled"] for r in tpu]
        summary["cpu_cold_startup_s"] = cold_cpu["startup_s"]
        summary["loads"] = [r["load"] for r in cpu + tpu]
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
