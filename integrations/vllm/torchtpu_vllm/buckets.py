"""Padded sizes: every step is padded to a (tokens, requests) bucket, so XLA compiles one program
per bucket, all of them at startup, instead of one per exact batch."""

from __future__ import annotations

MIN_TOKEN_BUCKET = 8


def _powers_up_to(start: int, limit: int) -> list[int]:
    sizes = []
    b = start
    while b < limit:
        sizes.append(b)
        b *= 2
    sizes.append(limit)
    return sizes


def token_buckets(max_num_tokens: int) -> list[int]:
    """The padded token counts a step runs at: powers of two from MIN_TOKEN_BUCKET, and
    max_num_tokens itself."""
    return _powers_up_to(min(MIN_TOKEN_BUCKET, max_num_tokens), max_num_tokens)


def request_buckets(max_num_reqs: int) -> list[int]:
    """The padded request counts: powers of two from 1, and max_num_reqs itself."""
    return _powers_up_to(1, max_num_reqs)


def bucket_of(n: int, buckets: list[int]) -> int:
    for size in buckets:
        if size >= n:
            return size
    raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")


def step_buckets(max_num_tokens: int, max_num_reqs: int) -> list[tuple[int, int]]:
    """Every (tokens, requests) bucket a step can land in. A request schedules at least one
    token, so a request bucket r (holding more requests than the bucket below it) only pairs
    with token buckets that many tokens can reach."""
    tokens = token_buckets(max_num_tokens)
    reqs = request_buckets(max_num_reqs)
    out = []
    for i, r in enumerate(reqs):
        fewest = reqs[i - 1] + 1 if i else 1
        if fewest > max_num_tokens:
            break
        out += [(t, r) for t in tokens if t >= fewest]
    return out
