"""Client half of scripts/vllm_load_test.sh: a bounded load on a running `vllm serve`.

    python -m torchtpu_vllm.load_test http://127.0.0.1:PORT MODEL [--clients 32] [--seconds 120]

`clients` concurrent clients send completion and chat requests, streaming and not, greedy and
sampled (some seeded), with prompts of mixed lengths, for `seconds` seconds; about one request in
twenty is malformed on purpose (a negative max_tokens, an unknown model, a prompt longer than the
model's context, a broken body) and must get an HTTP 4xx. Every other response must be well-formed
with exactly max_tokens tokens (ignore_eos). The server's resident memory (its process and
children, from /proc) is sampled every 5 s and must stay within +-2% of its level at the end of
the warm-up (the first `warmup` seconds). Prints one JSON summary; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time

WORDS = ("the quick brown fox jumps over a lazy dog while tiny models babble about paged "
         "attention continuous batching and programs compiled for every bucket").split()


def _rss_bytes(pid: int) -> int:
    """Resident memory of `pid` and its descendants."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


class Stats:
    def __init__(self) -> None:
        self.ok = 0
        self.failed: list[str] = []
        self.bad_ok = 0  # malformed requests answered with a 4xx
        self.latencies: list[float] = []
        self.tokens = 0


def _prompt(rng: random.Random) -> str:
    n = rng.choice([1, 3, 8, 20, 40, 50])  # up to ~160 tokens: with 48 new, in 256
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _request(rng: random.Random, model: str) -> tuple[str, dict, int]:
    max_tokens = rng.choice([1, 4, 16, 32, 48])
    body: dict = {"model": model, "max_tokens": max_tokens, "ignore_eos": True,
                  "temperature": rng.choice([0.0, 0.0, 0.8])}
    if body["temperature"] and rng.random() < 0.5:
        body["seed"] = rng.randrange(1 << 30)
        body["top_p"] = 0.9
    if rng.random() < 0.5:
        path = "/v1/completions"
        body["prompt"] = _prompt(rng)
    else:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": _prompt(rng)}]
    body["stream"] = rng.random() < 0.5
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    return path, body, max_tokens


def _malformed(rng: random.Random, model: str) -> tuple[str, object]:
    kind = rng.randrange(4)
    if kind == 0:
        return "/v1/completions", {"model": model, "prompt": "hi", "max_tokens": -1}
    if kind == 1:
        return "/v1/completions", {"model": "no-such-model", "prompt": "hi", "max_tokens": 4}
    if kind == 2:
        long_prompt = " ".join(WORDS * 60)
        return "/v1/completions", {"model": model, "prompt": long_prompt, "max_tokens": 4}
    return "/v1/chat/completions", "{not json"


async def _one(session, base: str, rng: random.Random, model: str, stats: Stats) -> None:
    import aiohttp

    if rng.random() < 0.05:
        path, body = _malformed(rng, model)
        data = body if isinstance(body, str) else json.dumps(body)
        async with session.post(base + path, data=data,
                                headers={"Content-Type": "application/json"}) as r:
            await r.read()
            if 400 <= r.status < 500:
                stats.bad_ok += 1
            else:
                stats.failed.append(f"malformed request {path} got HTTP {r.status}")
        return
    path, body, want = _request(rng, model)
    t0 = time.perf_counter()
    try:
        async with session.post(base + path, json=body) as r:
            if r.status != 200:
                stats.failed.append(f"{path} HTTP {r.status}: {(await r.text())[:200]}")
                return
            if body["stream"]:
                usage, done, chunks = None, False, 0
                async for raw in r.content:
                    line = raw.decode().strip()
                    if not line:
                        continue
                    if not line.startswith("data: "):
                        raise ValueError(f"not an SSE data line: {line[:80]!r}")
                    payload = line[len("data: "):]
                    if payload == "[DONE]":
                        done = True
                        break
                    chunk = json.loads(payload)
                    chunks += 1
                    usage = chunk.get("usage") or usage
                if not done or usage is None:
                    raise ValueError(f"stream ended without [DONE] or usage ({chunks} chunks)")
            else:
                reply = await r.json()
                choice = reply["choices"][0]
                text = choice["text"] if "text" in choice else choice["message"]["content"]
                if not isinstance(text, str):
                    raise ValueError(f"no text in {reply}")
                usage = reply["usage"]
            if usage["completion_tokens"] != want:
                raise ValueError(f"{usage['completion_tokens']} tokens, asked {want}")
            stats.ok += 1
            stats.tokens += want
            stats.latencies.append(time.perf_counter() - t0)
    except (ValueError, KeyError, json.JSONDecodeError, aiohttp.ClientError) as e:
        stats.failed.append(f"{path} (stream={body['stream']}): {type(e).__name__}: {e}")


async def _client(base, model, seed, deadline, stats):
    import aiohttp

    rng = random.Random(seed)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < deadline:
            await _one(session, base, rng, model, stats)


async def _sample_rss(pid: int, deadline: float, series: list) -> None:
    start = time.monotonic()
    while time.monotonic() < deadline:
        series.append((round(time.monotonic() - start, 1), _rss_bytes(pid)))
        await asyncio.sleep(5)


async def run(base: str, model: str, clients: int, seconds: float, warmup: float,
              pid: int | None) -> dict:
    stats = Stats()
    deadline = time.monotonic() + seconds
    rss: list = []
    tasks = [_client(base, model, 1000 + i, deadline, stats) for i in range(clients)]
    if pid:
        tasks.append(_sample_rss(pid, deadline, rss))
    t0 = time.perf_counter()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    summary = {
        "clients": clients, "seconds": round(elapsed, 1), "ok": stats.ok,
        "failed": len(stats.failed), "first_failures": stats.failed[:5],
        "malformed_answered_4xx": stats.bad_ok,
        "tokens_per_s": round(stats.tokens / elapsed, 1),
        "latency_p50_s": round(statistics.median(stats.latencies), 3) if stats.latencies else None,
        "latency_p99_s": (round(statistics.quantiles(stats.latencies, n=100)[98], 3)
                          if len(stats.latencies) >= 100 else None),
    }
    if rss:
        after = [b for t, b in rss if t >= warmup] or [rss[-1][1]]
        base_rss = after[0]
        drift = max(abs(b - base_rss) for b in after) / base_rss
        summary.update(rss_mib=[(t, round(b / 2**20, 1)) for t, b in rss],
                       rss_drift_after_warmup=round(drift, 4), rss_flat=drift <= 0.02)
    summary["passed"] = (not stats.failed and stats.ok > 0 and stats.bad_ok > 0
                         and summary.get("rss_flat", True))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("base")
    parser.add_argument("model")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--warmup", type=float, default=30)
    args = parser.parse_args()
    pid = int(os.environ["VLLM_SERVER_PID"]) if os.environ.get("VLLM_SERVER_PID") else None
    from .demo_client import wait_until_healthy

    alive = (lambda: os.path.exists(f"/proc/{pid}")) if pid else (lambda: True)
    wait_until_healthy(args.base, 900, alive)
    summary = asyncio.run(run(args.base, args.model, args.clients, args.seconds, args.warmup,
                              pid))
    print(json.dumps(summary), flush=True)
    sys.exit(0 if summary["passed"] else 1)


if __name__ == "__main__":
    main()
