"""Helpers shared by the vLLM plugin tests: prompts, generation, CPU teacher-forced check."""

from __future__ import annotations

import torch

# Near-ties between the two largest logits may order differently on another backend; a token
# counts as the argmax when its CPU logit is within this of the CPU maximum.
TIE_TOLERANCE = 1e-4


def prompts_of(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    # ids 6.. skip the special tokens (eos would not stop: ignore_eos, but keep prompts plain)
    return [torch.randint(6, 380, (n,), generator=g).tolist() for n in lengths]


def generate(llm, prompts, max_tokens):
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    return outs


def check_teacher_forced(cpu_model, prompt, generated):
    ids = torch.tensor([prompt + list(generated[:-1])])
    with torch.no_grad():
        logits = cpu_model(ids).logits[0, len(prompt) - 1 :]
    assert logits.shape[0] == len(generated)
    exact = 0
    for step, token in enumerate(generated):
        row = logits[step]
        best = int(row.argmax())
        if best == token:
            exact += 1
            continue
        gap = float(row[best] - row[token])
        assert gap <= TIE_TOLERANCE, (
            f"step {step}: vLLM on tpu chose {token}, CPU argmax is {best} "
            f"(logit gap {gap:.3g}); prompt length {len(prompt)}"
        )
    return exact


