"""vLLM on tpu in compiled mode (no enforce_eager): TpuModelRunner traces and compiles one
program per (tokens, requests) bucket at startup (model, every layer's paged attention and KV
write, logits, greedy tokens) and one sampler program per request bucket. Checked here: greedy
tokens equal the CPU argmax teacher-forced with Transformers; a decode step is ONE program
(two with sampling) with one upload and one download; nothing compiles during traffic
(TORCHTPU_VLLM_STRICT_COMPILES=1 makes any compile after warm-up an error in the engine); sampling
parameters are runtime values and seeds reproduce; a second engine start loads every program
from the disk cache without compiling or tracing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from vllm_checks import check_teacher_forced, generate, prompts_of

ENGINE = dict(dtype="float32", max_model_len=256, max_num_seqs=4, max_num_batched_tokens=32,
              block_size=16, enable_prefix_caching=True, enable_chunked_prefill=True, seed=0)


@pytest.fixture(scope="module")
def llm(model_dir):
    from vllm import LLM

    os.environ["TORCHTPU_VLLM_STRICT_COMPILES"] = "1"  # inherited by the engine process
    try:
        engine = LLM(model=model_dir, **ENGINE)
    finally:
        os.environ.pop("TORCHTPU_VLLM_STRICT_COMPILES")
    yield engine
    del engine


def metrics(llm):
    return llm.collective_rpc("torchtpu_metrics")[0]


def run_steps(llm, prompts, params):
    """Adds the requests, steps the engine to the end; returns (outputs by id, steps, metrics
    delta). delta["sampling_steps"] counts the steps that scheduled a request with temperature > 0
    (those run the sampler program too). The engine core steps on its own as requests arrive, so
    which requests share a step (and whether a greedy request ends up alone in one) is not fixed:
    the count comes from what each step returned."""
    from vllm import TokensPrompt

    engine = llm.llm_engine
    before = metrics(llm)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), TokensPrompt(prompt_token_ids=p), params[i])
    outs, steps, sampling_steps = {}, 0, 0
    while engine.has_unfinished_requests():
        sampled = False
        for out in engine.step():
            sampled |= params[int(out.request_id)].temperature > 0
            if out.finished:
                outs[out.request_id] = list(out.outputs[0].token_ids)
        steps += 1
        sampling_steps += sampled
    after = metrics(llm)
    delta = {k: after[k] - before[k] for k in ("executions", "cache_misses", "programs_compiled",
                                               "h2d_transfers", "d2h_transfers", "cpu_fallbacks")}
    delta["sampling_steps"] = sampling_steps
    return [outs[str(i)] for i in range(len(prompts))], steps, delta


def test_compiled_greedy_matches_cpu_teacher_forced(llm, cpu_model):
    assert llm.llm_engine.vllm_config.compilation_config.backend == "tpu"
    stats = llm.collective_rpc("torchtpu_warmup_stats")[0]
    # 3 token buckets x 3 request buckets (8/16/32 x 1/2/4), and 3 sampler programs.
    assert stats["programs"] == 12, stats
    prompts = prompts_of([4, 13, 40], seed=5)
    outs = generate(llm, prompts, max_tokens=18)
    for prompt, out in zip(prompts, outs):
        generated = list(out.outputs[0].token_ids)
        assert len(generated) == 18
        check_teacher_forced(cpu_model, prompt, generated)


def test_one_program_per_greedy_step_and_no_compiles(llm, cpu_model):
    from vllm import SamplingParams

    prompts = prompts_of([3, 9, 20, 45], seed=6)
    params = [SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)] * 4
    outs, steps, delta = run_steps(llm, prompts, params)
    for prompt, generated in zip(prompts, outs):
        check_teacher_forced(cpu_model, prompt, generated)
    assert delta["cache_misses"] == 0 and delta["programs_compiled"] == 0, delta
    assert delta["cpu_fallbacks"] == 0, delta
    # Every step: its buffer up, one program, its tokens down.
    assert delta["executions"] == steps, (steps, delta)
    assert delta["h2d_transfers"] == steps and delta["d2h_transfers"] == steps, (steps, delta)


def test_sampling_takes_one_more_program_and_seeds_reproduce(llm):
    from vllm import SamplingParams

    prompts = prompts_of([5, 11, 7], seed=7)
    mixed = [SamplingParams(temperature=0.8, top_p=0.9, top_k=20, min_p=0.05, seed=11,
                            max_tokens=12, ignore_eos=True),
             SamplingParams(temperature=1.2, seed=12, max_tokens=12, ignore_eos=True),
             SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)]
    outs, steps, delta = run_steps(llm, prompts, mixed)
    # Every step's model program, and the sampler program in each step that samples: most steps
    # hold a sampled request, but the core may start before the last request arrives.
    assert delta["sampling_steps"] >= steps - 2, (steps, delta)
    assert delta["cache_misses"] == 0, delta
    assert delta["executions"] == steps + delta["sampling_steps"], (steps, delta)
    # The seeded request alone, and beside other requests in another order: the same tokens.
    alone, _, _ = run_steps(llm, prompts[:1], mixed[:1])
    assert alone[0] == outs[0]
    again, _, _ = run_steps(llm, [prompts[1], prompts[0]], [mixed[1], mixed[0]])
    assert again == [outs[1], outs[0]]
    greedy, _, _ = run_steps(llm, prompts[2:], [mixed[2]])
    assert greedy[0] == outs[2]
    # top_k=1 (any temperature) and min_p=1 leave only the argmax.
    narrow = [SamplingParams(temperature=1.5, top_k=1, seed=3, max_tokens=12, ignore_eos=True),
              SamplingParams(temperature=1.5, min_p=1.0, seed=4, max_tokens=12, ignore_eos=True)]
    argmax, _, _ = run_steps(llm, [prompts[2], prompts[2]], narrow)
    assert argmax == [outs[2], outs[2]]


WARM_START = textwrap.dedent(
    """
    import json, sys
    from vllm import LLM

    def main():
        llm = LLM(model=sys.argv[1], **json.loads(sys.argv[2]))
        print("STATS " + json.dumps(llm.collective_rpc("torchtpu_warmup_stats")[0]), flush=True)

    if __name__ == "__main__":
        main()
    """
)


def test_warm_start_loads_every_program_without_compiling(model_dir, tmp_path):
    script = tmp_path / "start.py"
    script.write_text(WARM_START)
    config = dict(ENGINE, max_num_seqs=2, max_num_batched_tokens=16)
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    stats = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(script), model_dir, json.dumps(config)],
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("STATS "))
        stats.append(json.loads(line[len("STATS "):]))
    cold, warm = stats
    assert cold["programs"] == warm["programs"] == 6  # (8, 16) x (1, 2), 2 samplers
    assert cold["compiled"] >= cold["programs"], cold
    assert warm["compiled"] == 0 and warm["loaded_from_disk"] >= warm["programs"], warm
    # The traced graphs came from the disk too.
    assert warm["trace_seconds"] < cold["trace_seconds"], stats
