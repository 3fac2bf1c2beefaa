"""A client of `vllm serve` on tpu through the official OpenAI Python client: a completion, a chat
completion and a streamed completion.

    bash scripts/vllm_demo.sh                  # starts `vllm serve` on tpu and runs this client
    .venv-vllm/bin/python examples/vllm_openai_client.py http://127.0.0.1:PORT/v1 MODEL_NAME

The server side is vLLM's own OpenAI-compatible server, unchanged, with the torchtpu platform
plugin underneath (see scripts/vllm_demo.sh for the `vllm serve` command line).
"""

import sys

from openai import OpenAI


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url, api_key="unused")
    completion = client.completions.create(model=model, prompt="The quick brown fox",
                                           max_tokens=12, temperature=0.0)
    print("completion:", repr(completion.choices[0].text))
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello, how are you?"}],
        max_tokens=12, temperature=0.0)
    print("chat:", repr(chat.choices[0].message.content))
    pieces = [c.choices[0].text for c in client.completions.create(
        model=model, prompt="One two three", max_tokens=12, temperature=0.0, stream=True)]
    print(f"streamed in {len(pieces)} chunks:", repr("".join(pieces)))
    assert completion.usage.completion_tokens == 12 and pieces


if __name__ == "__main__":
    main()
