"""vLLM on tpu with compilation on (no enforce_eager): TpuModelRunner compiles the model with
torch.compile(backend="tpu") at startup for every token bucket, piecewise around attention, and
greedy tokens still equal the CPU argmax teacher-forced with Transformers."""

from __future__ import annotations

import pytest
from vllm_checks import check_teacher_forced, generate, prompts_of


@pytest.fixture(scope="module")
def llm(model_dir):
    from vllm import LLM

    engine = LLM(
        model=model_dir,
        dtype="float32",
        max_model_len=256,
        max_num_seqs=4,
        max_num_batched_tokens=32,
        block_size=16,
        enable_prefix_caching=True,
        enable_chunked_prefill=True,
        seed=0,
    )
    yield engine
    del engine


def test_compiled_greedy_matches_cpu_teacher_forced(llm, cpu_model):
    assert llm.llm_engine.vllm_config.compilation_config.backend == "tpu"
    before = llm.collective_rpc("torchtpu_metrics")[0]
    prompts = prompts_of([4, 13, 40], seed=5)
    outs = generate(llm, prompts, max_tokens=18)
    for prompt, out in zip(prompts, outs):
        generated = list(out.outputs[0].token_ids)
        assert len(generated) == 18
        check_teacher_forced(cpu_model, prompt, generated)
    after = llm.collective_rpc("torchtpu_metrics")[0]
    assert after["executions"] > before["executions"]
    assert after["cpu_fallbacks"] == 0, after["cpu_fallbacks_by_op"]
