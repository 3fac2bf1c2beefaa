"""vLLM's own LLM engine on tpu through the torchtpu_vllm plugin, checked against Transformers
on the CPU: every greedy token vLLM produces must be the CPU model's argmax given the same
prefix (teacher forcing), for a batch of prompts of different lengths, with prefix caching and
chunked prefill on, sequences that outgrow their first KV block, and enforce_eager=True.

Run with .venv-vllm (scripts/test_vllm.sh): vLLM pins transformers<5.20.
"""

from __future__ import annotations

import pytest
import torch
from vllm_checks import check_teacher_forced, generate, prompts_of

BLOCK = 16
MAX_BATCHED_TOKENS = 32  # smaller than the longest prompt: its prefill is chunked


@pytest.fixture(scope="module")
def llm(model_dir):
    from vllm import LLM

    engine = LLM(
        model=model_dir,
        dtype="float32",
        max_model_len=256,
        max_num_seqs=4,
        max_num_batched_tokens=MAX_BATCHED_TOKENS,
        block_size=BLOCK,
        enable_prefix_caching=True,
        enable_chunked_prefill=True,
        enforce_eager=True,
        seed=0,
    )
    yield engine
    del engine


def test_current_platform_is_the_tpu_plugin(llm):
    from vllm.platforms import current_platform

    from torchtpu_vllm.platform import TpuPlatform

    assert isinstance(current_platform, TpuPlatform)
    assert current_platform.device_type == "tpu"
    assert current_platform.dispatch_key == "PrivateUse1"
    assert llm.llm_engine.vllm_config.device_config.device.type == "tpu"
    assert llm.llm_engine.vllm_config.parallel_config.worker_cls == (
        "torchtpu_vllm.worker.TpuWorker"
    )


def test_batched_greedy_matches_cpu_teacher_forced(llm, cpu_model):
    # 3 and 9: short prefills; 20: more than a block; 45: prefill chunked over two steps
    # (32-token budget). With 20 new tokens every sequence outgrows its first KV block.
    prompts = prompts_of([3, 9, 20, 45], seed=1)
    outs = generate(llm, prompts, max_tokens=20)
    exact = total = 0
    for prompt, out in zip(prompts, outs):
        generated = list(out.outputs[0].token_ids)
        assert len(generated) == 20
        exact += check_teacher_forced(cpu_model, prompt, generated)
        total += len(generated)
    assert exact >= total - 2, f"only {exact}/{total} tokens were the exact CPU argmax"


def test_prefix_cache_hit_gives_the_same_tokens(llm, cpu_model):
    base = prompts_of([40], seed=2)[0]
    first = generate(llm, [base], max_tokens=6)[0]
    # Same 40-token prefix (two full blocks cached) with a different tail.
    extended = base + prompts_of([5], seed=3)[0]
    again = generate(llm, [base, extended], max_tokens=6)
    assert list(again[0].outputs[0].token_ids) == list(first.outputs[0].token_ids)
    assert again[0].num_cached_tokens >= 2 * BLOCK
    assert again[1].num_cached_tokens >= 2 * BLOCK
    for prompt, out in zip([base, extended], again):
        check_teacher_forced(cpu_model, prompt, list(out.outputs[0].token_ids))


def test_mixed_prefill_and_decode_batch(llm, cpu_model):
    """A long request is admitted while others are decoding, so one step holds decodes and a
    (chunked) prefill together; every request still matches the CPU."""
    from vllm import SamplingParams, TokensPrompt

    engine = llm.llm_engine
    prompts = prompts_of([5, 7, 60], seed=4)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    engine.add_request("a", TokensPrompt(prompt_token_ids=prompts[0]), params)
    engine.add_request("b", TokensPrompt(prompt_token_ids=prompts[1]), params)
    finished = {}
    steps = 0
    while engine.has_unfinished_requests():
        if steps == 2:
            engine.add_request("c", TokensPrompt(prompt_token_ids=prompts[2]), params)
        for out in engine.step():
            if out.finished:
                finished[out.request_id] = list(out.outputs[0].token_ids)
        steps += 1
        assert steps < 200
    for name, prompt in zip("abc", prompts):
        assert len(finished[name]) == 12
        check_teacher_forced(cpu_model, prompt, finished[name])


def test_no_cpu_fallbacks_in_the_worker(llm):
    """Everything the engine ran on tpu (model, attention, input preparation, sampling) was
    lowered to XLA: torchtpu's CPU fallback never ran in the worker process."""
    metrics = llm.collective_rpc("torchtpu_metrics")[0]
    assert metrics["executions"] > 0
    assert metrics["cpu_fallbacks"] == 0, metrics["cpu_fallbacks_by_op"]


def test_logprobs_sample_with_vllms_sampler_and_match_the_cpu(llm, cpu_model):
    """A request asking for logprobs samples with vLLM's own Sampler (the tpu sampler has no
    logprobs) on the step's logits: its greedy tokens and their logprobs are the CPU's."""
    from vllm import SamplingParams, TokensPrompt

    prompt = prompts_of([12], seed=8)[0]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=3)
    out = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params)[0].outputs[0]
    generated = list(out.token_ids)
    check_teacher_forced(cpu_model, prompt, generated)
    ids = torch.tensor([prompt + generated[:-1]])
    with torch.no_grad():
        want = torch.log_softmax(cpu_model(ids).logits[0, len(prompt) - 1:].double(), dim=-1)
    for step, (token, entry) in enumerate(zip(generated, out.logprobs)):
        assert token in entry
        top3 = set(want[step].topk(3).indices.tolist())
        assert top3 <= set(entry), (step, top3, set(entry))
        for tok, lp in entry.items():
            assert abs(lp.logprob - float(want[step, tok])) < 1e-4, (step, tok)
