#!/usr/bin/env bash
# A bounded load on `vllm serve` on tpu (not part of CI: it runs for minutes). Makes the tiny
# random Llama, starts the OpenAI server on 127.0.0.1 (compiled mode: every bucket compiled at
# startup), then torchtpu_vllm.load_test sends LOAD_CLIENTS (32) concurrent clients' completion
# and chat requests, streaming and not, mixed lengths, with malformed ones that must get an HTTP
# 4xx, for LOAD_SECONDS (120) seconds, and checks every answer and the server's RSS (flat within
# +-2% after the warm-up). Prints the client's JSON summary; exits non-zero on any failure.
#   bash scripts/vllm_load_test.sh            # VLLM_LOAD_ARGS adds `vllm serve` flags
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/lib/vllm_tiny_server.sh
# shellcheck disable=SC2086  # VLLM_LOAD_ARGS is a list of flags
start_tiny_server $((32 << 20)) --max-num-seqs 8 --max-num-batched-tokens 128 ${VLLM_LOAD_ARGS:-}
VLLM_SERVER_PID="$server_pid" .venv-vllm/bin/python -m torchtpu_vllm.load_test \
  "http://127.0.0.1:$port" tiny-llama --clients "${LOAD_CLIENTS:-32}" \
  --seconds "${LOAD_SECONDS:-120}" || fail_with_server_log
grep -c "after warm-up" "$work/server.log" | sed 's/^/compile warnings after warm-up: /' || true
