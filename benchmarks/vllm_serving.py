"""vLLM offline serving on tpu (torchtpu_vllm plugin) vs vLLM's own CPU platform, same venv,
same tiny random-weight Llama (head_dim 32: vLLM's CPU attention rejects 16). JSON lines.

    .venv-vllm/bin/python benchmarks/vllm_serving.py [--prompts 8] [--tokens 32]

Each configuration runs in a fresh process: startup (LLM construction, incl. warm-up
compiles), time to first token (one prompt, max_tokens=1, after startup), then offline
throughput (all prompts batched, greedy, `tokens` new tokens each). tpu runs twice per mode
with one program cache folder: `cold` starts from an empty cache, `warm` reuses it.
Ratios are against the CPU platform measured in the same invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _child(args) -> None:
    from vllm import LLM, SamplingParams, TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(
        model=args.model,
        dtype="float32",
        max_model_len=256,
        max_num_seqs=args.prompts,
        max_num_batched_tokens=128,
        enforce_eager=args.mode == "eager",
        seed=0,
    )
    startup = time.perf_counter() - t0
    prompts = [
        TokensPrompt(prompt_token_ids=[(7 * i + 11 * j) % 300 + 6 for j in range(24 + i)])
        for i in range(args.prompts)
    ]
    t0 = time.perf_counter()
    llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=1))
    ttft = time.perf_counter() - t0
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - t0
    new_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    metrics = {}
    if args.platform == "tpu":
        m = llm.collective_rpc("torchtpu_metrics")[0]
        metrics = {k: m[k] for k in ("compiles", "compile_seconds", "program_cache_entries",
                                     "cpu_fallbacks") if k in m}
    print(
        "RESULT "
        + json.dumps(
            {
                "startup_s": round(startup, 2),
                "ttft_s": round(ttft, 3),
                "tokens_per_s": round(new_tokens / elapsed, 2),
                "new_tokens": new_tokens,
                "first_tokens": [list(o.outputs[0].token_ids[:4]) for o in outs[:2]],
                **{f"worker_{k}": v for k, v in metrics.items()},
            }
        ),
        flush=True,
    )


def _run(model: str, platform: str, mode: str, cache_dir: str, args) -> dict:
    env = dict(os.environ, TORCHTPU_CACHE_DIR=cache_dir)
    env.setdefault("TORCHTPU_VLLM_KV_CACHE_BYTES", str(16 << 20))
    if platform == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        env["TORCHTPU_VLLM"] = "0"
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    cmd = [sys.executable, __file__, "--child", "--model", model, "--mode", mode,
           "--platform", platform,
           "--prompts", str(args.prompts), "--tokens", str(args.tokens)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{platform}/{mode} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--model")
    parser.add_argument("--mode", default="eager")
    parser.add_argument("--platform", default="tpu")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--modes", default="eager,compiled")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return

    from torchtpu_vllm.tiny_model import make_tiny_llama

    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_llama(os.path.join(tmp, "model"), head_dim=32, num_heads=2,
                                num_kv_heads=1)
        base = _run(model, "cpu", "eager", os.path.join(tmp, "unused"), args)
        print(json.dumps({"platform": "cpu (vLLM's own)", "mode": "eager", **base}), flush=True)
        for mode in args.modes.split(","):
            cache = os.path.join(tmp, f"cache-{mode}")
            for start in ("cold", "warm"):
                r = _run(model, "tpu", mode, cache, args)
                r.update(
                    platform="tpu (torchtpu_vllm)",
                    mode=mode,
                    start=start,
                    startup_vs_cpu=round(r["startup_s"] / base["startup_s"], 2),
                    ttft_vs_cpu=round(r["ttft_s"] / base["ttft_s"], 2),
                    tokens_per_s_vs_cpu=round(r["tokens_per_s"] / base["tokens_per_s"], 3),
                    programs_on_disk=sum(len(f) for _, _, f in os.walk(cache)),
                )
                print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
