"""Client half of scripts/vllm_demo.sh: waits for `vllm serve`, sends a completion and a chat
request through the OpenAI HTTP API, prints the answers, and checks that a bad request gets an
HTTP 4xx while the server keeps serving. Exits non-zero on any failure.

    python -m torchtpu_vllm.demo_client http://127.0.0.1:PORT MODEL_NAME
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request


def _post(url: str, body: dict, timeout: float = 300) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def wait_until_healthy(base: str, timeout_s: float, server_alive) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if not server_alive():
            raise SystemExit("vllm serve exited before it became healthy")
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(1)
    raise SystemExit(f"vllm serve was not healthy within {timeout_s:.0f} s")


def run(base: str, model: str) -> None:
    status, body = _post(
        base + "/v1/completions",
        {"model": model, "prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0},
    )
    if status != 200:
        raise SystemExit(f"/v1/completions: HTTP {status}: {body}")
    text = body["choices"][0]["text"]
    print(f"completion ({body['usage']['completion_tokens']} tokens): {text!r}")

    status, body = _post(
        base + "/v1/chat/completions",
        {
            "model": model,
            "messages": [{"role": "user", "content": "Hello, how are you today?"}],
            "max_tokens": 12,
            "temperature": 0,
        },
    )
    if status != 200:
        raise SystemExit(f"/v1/chat/completions: HTTP {status}: {body}")
    print(f"chat: {body['choices'][0]['message']['content']!r}")

    status, body = _post(
        base + "/v1/completions", {"model": model, "prompt": "hi", "max_tokens": -5}
    )
    if not 400 <= status < 500:
        raise SystemExit(f"a negative max_tokens should be HTTP 4xx, got {status}: {body}")
    print(f"bad request (max_tokens=-5): HTTP {status}")

    status, body = _post(
        base + "/v1/completions",
        {"model": model, "prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0},
    )
    if status != 200 or body["choices"][0]["text"] != text:
        raise SystemExit(f"server did not keep serving after the bad request: {status} {body}")
    print("after the bad request the server still answers (same greedy completion)")


def main() -> None:
    import os

    base, model = sys.argv[1], sys.argv[2]
    pid = int(os.environ.get("VLLM_SERVER_PID", "0"))

    def alive() -> bool:
        if not pid:
            return True
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False

    wait_until_healthy(base, float(os.environ.get("VLLM_DEMO_STARTUP_TIMEOUT", "600")), alive)
    run(base, model)


if __name__ == "__main__":
    main()
