"""Transformers' generate() on tpu against the same call on the CPU.

A tiny Llama (built from a config under a fixed seed, no hub) generates from a left-padded batch
of prompts on both devices. Deterministic modes (greedy with the dynamic and the static cache,
beam search, assisted decoding) must produce the same tokens as the CPU, and their scores must
agree within 1e-4 (float32; XLA accumulates matmuls and sums in a different order than CPU ATen,
and a few ulps of the logits is all that differs). Sampling draws from the tpu generator, whose
stream is not the CPU's, so it is checked by what it must satisfy: the same seed gives the same
samples, every sampled token lies in the CPU model's top-k at its position, and the empirical
distribution of the first token matches the CPU model's top-k probabilities.

Each mode generates few tokens: with the dynamic cache, every decoding step has a new key/value
length, so eager ops compile once per step and length.
"""

from __future__ import annotations

import copy

import pytest
import torch

import torchtpu
from conftest import new_graphs
from torchtpu import _dynamo as tpu_dynamo

transformers = pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

NEW_TOKENS = 4


def tiny_llama(seed, **overrides):
    torch.manual_seed(seed)
    cfg = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               vocab_size=256, intermediate_size=128, max_position_embeddings=64,
               pad_token_id=0, bos_token_id=None, eos_token_id=None)
    cfg.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**cfg)).eval()


@pytest.fixture(scope="module")
def models():
    model = tiny_llama(0)
    return model, copy.deepcopy(model).to("tpu")


@pytest.fixture(scope="module")
def prompts():
    ids = torch.randint(1, 256, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # the second prompt is left-padded by two tokens
    ids[1, :2] = 0
    return ids, mask


def generate_both(models, prompts, **kwargs):
    model_cpu, model_tpu = models
    ids, mask = prompts
    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=False, return_dict_in_generate=True,
                  output_scores=True, **kwargs)
    out_cpu = model_cpu.generate(ids, attention_mask=mask, **kwargs)
    out_tpu = model_tpu.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), **kwargs)
    assert out_tpu.sequences.device.type == "tpu"
    return out_cpu, out_tpu


def assert_same_generation(out_cpu, out_tpu):
    torch.testing.assert_close(out_tpu.sequences.cpu(), out_cpu.sequences, rtol=0, atol=0)
    assert len(out_tpu.scores) == len(out_cpu.scores)
    for step, (s_tpu, s_cpu) in enumerate(zip(out_tpu.scores, out_cpu.scores)):
        finite = torch.isfinite(s_cpu)  # beam search masks with -inf; the mask must match too
        assert torch.equal(torch.isfinite(s_tpu.cpu()), finite), f"step {step}"
        torch.testing.assert_close(s_tpu.cpu()[finite], s_cpu[finite], rtol=1e-4, atol=1e-4,
                                   msg=lambda m, step=step: f"scores of step {step}: {m}")


def test_greedy_dynamic_cache_matches_cpu(models, prompts):
    out_cpu, out_tpu = generate_both(models, prompts)
    assert out_cpu.sequences.shape == (2, 6 + NEW_TOKENS)
    assert_same_generation(out_cpu, out_tpu)


def test_greedy_static_cache_compiles_the_decode_step_once(models, prompts):
    # On tpu, a static cache makes generate() compile the decoding step with
    # torch.compile(backend="tpu") (Transformers' default compile config for the device type).
    out_cpu, out_tpu = generate_both(models, prompts, cache_implementation="static")
    assert_same_generation(out_cpu, out_tpu)

    # Other prompts of the same shape reuse every program: nothing compiles again.
    model_cpu, model_tpu = models
    ids, mask = prompts
    other = (ids + 7) % 256 * mask
    torch.tpu.synchronize()
    before = torchtpu.metrics()["programs_compiled"]
    again_tpu = model_tpu.generate(other.to("tpu"), attention_mask=mask.to("tpu"),
                                   max_new_tokens=NEW_TOKENS, do_sample=False,
                                   cache_implementation="static")
    torch.tpu.synchronize()
    assert torchtpu.metrics()["programs_compiled"] == before
    again_cpu = model_cpu.generate(other, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                                   do_sample=False, cache_implementation="static")
    torch.testing.assert_close(again_tpu.cpu(), again_cpu, rtol=0, atol=0)


def test_compiled_generate_compiles_one_prefill_per_length_and_one_decode_step(fresh_dynamo):
    # As Transformers documents it: a static cache sized for the worst case (max_cache_len: one
    # "bucket" for every call below) and model.forward = torch.compile(model.forward). The
    # prefill then runs as one compiled graph per prompt length, and generate() compiles the
    # decoding step (backend "tpu", dynamic=False: Transformers' default for the device type)
    # once: its inputs (one token per sequence, the 4-D mask over the whole cache, the cache)
    # have the same shapes at every step, every prompt length and every number of new tokens.
    model_cpu, model = tiny_llama(0), tiny_llama(0).to("tpu")
    for m in (model, model_cpu):
        m.generation_config.cache_implementation = "static"
        m.generation_config.max_cache_len = 32
    model.forward = torch.compile(model.forward, backend="tpu", dynamic=False)
    g = torch.Generator().manual_seed(3)
    prompts = {length: torch.randint(1, 256, (2, length), generator=g) for length in (6, 9)}

    def generate(length, new_tokens):
        ids = prompts[length]
        kwargs = dict(max_new_tokens=new_tokens, do_sample=False)
        torch.tpu.synchronize()
        programs = torchtpu.metrics()["programs_compiled"]
        before = set(tpu_dynamo.graph_metrics())
        out = model.generate(ids.to("tpu"), attention_mask=torch.ones_like(ids).to("tpu"),
                             **kwargs)
        torch.tpu.synchronize()
        programs = torchtpu.metrics()["programs_compiled"] - programs
        graphs = new_graphs(before)
        assert all(g.get("compiles", 0) <= 1 for g in graphs.values()), graphs
        expected = model_cpu.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
        return programs, len(graphs)

    # The prefill of 6 tokens and the decode step.
    assert generate(6, NEW_TOKENS)[1] == 2
    # A second prompt length in the bucket: its prefill graph, and no other graph.
    assert generate(9, NEW_TOKENS)[1] == 1
    # More new tokens after a prompt length seen before: no graph compiles. What compiles are
    # eager ops on the growing sequence, three programs per sequence length not seen before (the
    # sequences so far had 6..9 and 9..12 tokens when extended, these have 6..14: 13 and 14 are
    # new): generate() appends each token to the ids and to the 2-D attention mask with one
    # torch.cat (the two cats share a program: the new token's [2, 1] and the mask's column are
    # one layout, whatever dims their storages were made with), and reads the last position
    # (a clone and an add of ids[:, -1:], whose storage grows by a column per token).
    programs, graphs = generate(6, NEW_TOKENS + 5)
    assert graphs == 0
    assert programs <= 3 * 2, programs
    # The same call again compiles nothing at all.
    assert generate(6, NEW_TOKENS + 5) == (0, 0)


def test_beam_search_matches_cpu(models, prompts):
    out_cpu, out_tpu = generate_both(models, prompts, num_beams=3, num_return_sequences=2)
    assert_same_generation(out_cpu, out_tpu)
    torch.testing.assert_close(out_tpu.sequences_scores.cpu(), out_cpu.sequences_scores,
                               rtol=1e-4, atol=1e-5)


def test_assisted_decoding_matches_cpu(models, prompts):
    # Greedy assisted decoding returns exactly the target model's greedy tokens, whatever the
    # (here unrelated, smaller) assistant proposes; the check covers acceptance and rollback of
    # the caches on tpu. Transformers supports a batch of one for assisted decoding.
    draft = tiny_llama(1, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, intermediate_size=64)
    model_cpu, model_tpu = models
    ids = prompts[0][:1]
    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=False)
    plain_cpu = model_cpu.generate(ids, **kwargs)
    assisted_cpu = model_cpu.generate(ids, assistant_model=draft, **kwargs)
    assisted_tpu = model_tpu.generate(ids.to("tpu"), assistant_model=draft.to("tpu"), **kwargs)
    torch.testing.assert_close(assisted_cpu, plain_cpu, rtol=0, atol=0)
    torch.testing.assert_close(assisted_tpu.cpu(), plain_cpu, rtol=0, atol=0)


def test_sampling_follows_the_cpu_models_distribution(models, prompts):
    model_cpu, model_tpu = models
    ids = prompts[0][:1]
    top_k, n = 4, 1000
    kwargs = dict(do_sample=True, top_k=top_k, temperature=0.5, num_return_sequences=n)

    # The tpu generator is seeded by torch.manual_seed like CUDA's: same seed, same samples.
    torch.manual_seed(123)
    first = model_tpu.generate(ids.to("tpu"), max_new_tokens=2, **kwargs).cpu()
    torch.manual_seed(123)
    second = model_tpu.generate(ids.to("tpu"), max_new_tokens=2, **kwargs).cpu()
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    assert first.shape == (n, ids.shape[1] + 2)

    # Every sampled token is among the CPU model's top-k at its position.
    with torch.no_grad():
        logits = model_cpu(first).logits
    for pos in range(ids.shape[1], first.shape[1]):
        allowed = logits[:, pos - 1].topk(top_k).indices
        assert (allowed == first[:, pos:pos + 1]).any(dim=1).all(), f"position {pos}"

    # The first token's frequencies match the CPU model's top-k softmax at temperature 0.5:
    # each count lies within 5 binomial standard deviations (a false alarm has odds ~1e-6).
    probs_full = torch.softmax(logits[0, ids.shape[1] - 1] / 0.5, dim=-1)
    top = probs_full.topk(top_k)
    probs = top.values / top.values.sum()
    counts = torch.stack([(first[:, ids.shape[1]] == t).sum() for t in top.indices]).double()
    expected = n * probs.double()
    sigma = (n * probs.double() * (1 - probs.double())).sqrt()
    assert counts.sum() == n
    assert ((counts - expected).abs() <= 5 * sigma + 1).all(), (counts, expected)
