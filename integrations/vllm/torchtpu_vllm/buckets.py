"""Padded sizes: every batch is padded to a bucket so XLA compiles one program per bucket
instead of one per exact size."""

from __future__ import annotations

MIN_TOKEN_BUCKET = 8


def next_power_of_two(n: int, cap: int | None = None) -> int:
    """The next power of two >= n (at least 1), capped at `cap`."""
    b = 1
    while b < n:
        b *= 2
    return min(b, cap) if cap is not None else b


def token_buckets(max_num_tokens: int) -> list[int]:
    """The padded batch sizes (in tokens) the model runs at: powers of two from
    MIN_TOKEN_BUCKET, and max_num_tokens itself. Each is one XLA program per op (eager) or per
    graph piece (compiled), so a stream of requests of any size reuses a handful of programs."""
    sizes = []
    b = MIN_TOKEN_BUCKET
    while b < max_num_tokens:
        sizes.append(b)
        b *= 2
    sizes.append(max_num_tokens)
    return sizes


def padded_token_count(num_tokens: int, max_num_tokens: int) -> int:
    for size in token_buckets(max_num_tokens):
        if size >= num_tokens:
            return size
    return num_tokens
