"""Offline generation with vLLM on tpu: vLLM's own LLM class, scheduler and KV-cache manager, with
the torchtpu platform plugin underneath (installed with integrations/vllm; vLLM finds it through
its platform entry point). Each decode step is one XLA program, compiled at startup for every
(tokens, requests) bucket and cached on disk.

    .venv-vllm/bin/python examples/vllm_offline.py      # bash scripts/setup_vllm.sh makes the venv

A tiny random-weight Llama and its tokenizer are made locally (no hub access); the greedy tokens
are checked against Transformers on the CPU, teacher-forced.
"""

import argparse
import tempfile

import torch
from transformers import AutoModelForCausalLM
from vllm import LLM, SamplingParams

from torchtpu_vllm.tiny_model import make_tiny_llama


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=16)
    args = p.parse_args()

    model_dir = make_tiny_llama(tempfile.mkdtemp(prefix="tiny_llama_"))
    llm = LLM(model=model_dir, dtype="float32", max_model_len=256, max_num_seqs=4,
              max_num_batched_tokens=64, seed=0)
    prompts = ["The quick brown fox", "Paris is the capital of", "One two three four"]
    greedy = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    outputs = llm.generate(prompts, greedy)

    cpu = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for out in outputs:
        prompt, generated = list(out.prompt_token_ids), list(out.outputs[0].token_ids)
        with torch.no_grad():
            logits = cpu(torch.tensor([prompt + generated[:-1]])).logits[0, len(prompt) - 1:]
        matches = sum(int(logits[i].argmax()) == t for i, t in enumerate(generated))
        print(f"{out.prompt!r} -> {out.outputs[0].text!r} ({matches}/{len(generated)} tokens are "
              "the CPU's argmax)")
        # Near-ties between the two largest logits may order differently on another backend.
        for i, t in enumerate(generated):
            assert float(logits[i].max() - logits[i][t]) <= 1e-4, (out.prompt, i)

    sampled = llm.generate(prompts, SamplingParams(temperature=0.8, top_p=0.9, seed=7,
                                                   max_tokens=args.tokens))
    print("sampled:", [o.outputs[0].text for o in sampled])
    metrics = llm.collective_rpc("torchtpu_metrics")[0]
    print(f"worker: {metrics['programs_compiled']} programs compiled, "
          f"{metrics['executions']} executions, {metrics['cpu_fallbacks']} CPU fallbacks")


if __name__ == "__main__":
    main()
