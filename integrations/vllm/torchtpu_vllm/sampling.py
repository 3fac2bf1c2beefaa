"""Sampling inside a tpu program: greedy, temperature, top-k, top-p, min-p and seeded sampling,
each request's parameters as runtime values (so no value is in a program's signature).

The step program returns every request's greedy token; a step with a sampled request runs one
more program, `sample`, per request bucket. Random numbers are a counter-based hash of (the
request's seed, its position, the token id): a seeded request draws the same tokens whatever
batch it is in, and nothing on the device carries generator state between steps.

Requests asking for what this sampler does not do (logprobs, penalties, logit bias, bad words,
allowed token ids, min_tokens, structured output, custom logits processors) send their step
through vLLM's own Sampler on the step's logits instead (runtime.fallback_reason says why).
"""

from __future__ import annotations

import random

import numpy as np
import torch

# vLLM's threshold below which a temperature means greedy (vllm.v1.sample.sampler._SAMPLING_EPS).
SAMPLING_EPS = 1e-5

# Per request, six int32 words: temperature, top_p, min_p (float32 bits), top_k, seed, position.
PARAM_WORDS = 6

_M32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (lowbias32) on int64 tensors holding values in [0, 2**32): every
    product wraps in int64 and is masked back to 32 bits."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def uniform_noise(seeds: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """[R, vocab] float32 in (0, 1), a function of (seed, position, token id) only."""
    seeds = seeds.to(torch.int64) & _M32
    positions = positions.to(torch.int64) & _M32
    row = _mix32(seeds ^ _mix32(positions + 0x9E3779B9))
    token = _mix32(torch.arange(vocab, device=seeds.device, dtype=torch.int64) * 0x85EBCA6B & _M32)
    bits = _mix32(row[:, None] ^ token[None, :]) >> 8  # 24 bits
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def unpack_params(params: torch.Tensor, reqs: int):
    """The parameter words of a step buffer: (temperature, top_p, min_p, top_k, seed, position)."""
    words = params.view(PARAM_WORDS, reqs)
    floats = words[:3].view(torch.float32)
    return floats[0], floats[1], floats[2], words[3], words[4], words[5]


def sample(logits: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """[R] int32 tokens from logits [R, V] and the step's parameter words [PARAM_WORDS * R]:
    vLLM's order (temperature, then min-p, then top-k and top-p on what min-p kept), and its
    draw: the argmax of probs / q with q ~ Exp(1) (an exponential race). Greedy rows (temperature
    below SAMPLING_EPS) take the argmax of the logits."""
    reqs, vocab = logits.shape
    temperature, top_p, min_p, top_k, seeds, positions = unpack_params(params, reqs)
    logits = logits.to(torch.float32)
    greedy = logits.argmax(dim=-1)
    random_rows = temperature >= SAMPLING_EPS
    scaled = logits / torch.where(random_rows, temperature, 1.0)[:, None]
    probs = torch.softmax(scaled, dim=-1)
    top = probs.amax(dim=-1, keepdim=True)
    probs = torch.where(probs >= min_p[:, None] * top, probs, 0.0)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(vocab, device=logits.device)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep_sorted = (rank[None, :] < top_k[:, None]) & (mass_before < top_p[:, None])
    keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
    kept = torch.where(keep, probs, 0.0)
    q = -torch.log(uniform_noise(seeds, positions, vocab))
    drawn = (kept / q).argmax(dim=-1)
    return torch.where(random_rows, drawn, greedy).to(torch.int32)


class RequestSeeds:
    """A 31-bit seed per request: its SamplingParams.seed when given, else drawn once from the
    host's random generator (vLLM seeds it with the engine's seed)."""

    def __init__(self) -> None:
        self._seeds: dict[str, int] = {}

    def of(self, req_id: str, seed: int | None) -> int:
        s = self._seeds.get(req_id)
        if s is None:
            s = (seed & 0x7FFFFFFF) if seed is not None else random.getrandbits(31)
            self._seeds[req_id] = s
        return s

    def forget(self, req_id: str) -> None:
        self._seeds.pop(req_id, None)


def fallback_reason(params, num_output_tokens: int) -> str | None:
    """Why a request's next token needs vLLM's own Sampler (None when the tpu sampler does
    it). Structured output and engine-wide custom logits processors are decided per step by the
    runner."""
    if params is None:
        return "no sampling parameters"
    if params.logprobs is not None or params.prompt_logprobs is not None:
        return "logprobs"
    if params.logprob_token_ids or getattr(params, "prompt_logprob_token_ids", None):
        return "logprob token ids"
    if (params.presence_penalty != 0.0 or params.frequency_penalty != 0.0
            or params.repetition_penalty != 1.0):
        return "penalties"
    if params.logit_bias:
        return "logit bias"
    if params.allowed_token_ids:
        return "allowed token ids"
    if params.bad_words:
        return "bad words"
    if params.min_tokens and num_output_tokens < params.min_tokens:
        return "min_tokens"
    if getattr(params, "watermarking", None):
        return "watermarking"
    if getattr(params, "thinking_token_budget", None) is not None:
        return "thinking token budget"
    return None


def pack_params(out: np.ndarray, reqs: int, rows: list[tuple[float, float, float, int, int, int]]):
    """Writes the parameter words of `rows` (temperature, top_p, min_p, top_k, seed, position;
    one per real request, padding rows greedy) into out[: PARAM_WORDS * reqs]."""
    words = out[: PARAM_WORDS * reqs].reshape(PARAM_WORDS, reqs)
    floats = words[:3].view(np.float32)
    floats[0] = 0.0
    floats[1] = 1.0
    floats[2] = 0.0
    words[3:] = 0
    for i, (temp, top_p, min_p, top_k, seed, pos) in enumerate(rows):
        floats[0, i] = temp
        floats[1, i] = top_p
        floats[2, i] = min_p
        words[3, i] = top_k
        words[4, i] = seed
        words[5, i] = pos
