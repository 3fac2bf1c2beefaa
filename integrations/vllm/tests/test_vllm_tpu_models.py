"""The model families vLLM users serve, each as a tiny random-weight model (tiny_model.FAMILIES):
Qwen2, Qwen3 (q/k norms), Mistral (sliding window), Gemma 2 (attention and final logit
soft-capping, alternating sliding window, tied embeddings), Mixtral and Qwen2-MoE (mixtures of
experts, Qwen2-MoE with shared experts) and GPT-OSS (attention sinks, MoE with biases and its
clamped SwiGLU, YaRN). Each runs compiled (one program per step) and then op by op on the same
engine, and every greedy token must be the CPU Transformers argmax teacher-forced. The prompts
are longer than the 12-token windows, and chunked prefill mixes prefill and decode steps."""

from __future__ import annotations

import pytest
import torch
from vllm_checks import check_teacher_forced, generate, prompts_of

from torchtpu_vllm.tiny_model import FAMILIES, make_tiny_model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_cpu_teacher_forced_compiled_and_eager(family, tmp_path_factory):
    from transformers import AutoModelForCausalLM
    from vllm import LLM

    model_dir = make_tiny_model(str(tmp_path_factory.mktemp(family)), family)
    llm = LLM(model=model_dir, dtype="float32", max_model_len=128, max_num_seqs=2,
              max_num_batched_tokens=16, block_size=16, enable_chunked_prefill=True, seed=0)
    try:
        cpu = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        prompts = prompts_of([5, 27], seed=1)
        for eager in (False, True):
            llm.collective_rpc("torchtpu_set_eager_steps", args=(eager,))
            before = llm.collective_rpc("torchtpu_metrics")[0]
            outs = generate(llm, prompts, max_tokens=8)
            after = llm.collective_rpc("torchtpu_metrics")[0]
            for prompt, out in zip(prompts, outs):
                generated = list(out.outputs[0].token_ids)
                assert len(generated) == 8
                check_teacher_forced(cpu, prompt, generated)
            assert after["cpu_fallbacks"] == before["cpu_fallbacks"], after["cpu_fallbacks_by_op"]
            if not eager:
                # Compiled: nothing new to compile, a program per step.
                assert after["cache_misses"] == before["cache_misses"], family
    finally:
        del llm
