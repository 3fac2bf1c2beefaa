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
[ "${TORCHTPU_VLLM_SETUP_DONE:-0}" = 1 ] || bash scripts/setup_vllm.sh >/dev/null
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$server_pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
.venv-vllm/bin/python -m torchtpu_vllm.tiny_model "$work/model" >/dev/null
port="$(.venv-vllm/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
echo "== vllm serve on tpu, 127.0.0.1:$port (log: $work/server.log while it runs)"
TORCHTPU_VLLM_KV_CACHE_BYTES="${TORCHTPU_VLLM_KV_CACHE_BYTES:-$((32 << 20))}" \
  .venv-vllm/bin/python -m torchtpu_vllm.cli serve "$work/model" --host 127.0.0.1 --port "$port" \
  --served-model-name tiny-llama --dtype float32 --max-model-len 256 --max-num-seqs 8 \
  --max-num-batched-tokens 128 --seed 0 ${VLLM_LOAD_ARGS:-} \
  >"$work/server.log" 2>&1 &
server_pid=$!
if ! VLLM_SERVER_PID="$server_pid" .venv-vllm/bin/python -m torchtpu_vllm.load_test \
  "http://127.0.0.1:$port" tiny-llama --clients "${LOAD_CLIENTS:-32}" \
  --seconds "${LOAD_SECONDS:-120}"; then
  echo "== server log (last 60 lines)"
  tail -60 "$work/server.log"
  exit 1
fi
grep -c "after warm-up" "$work/server.log" | sed 's/^/compile warnings after warm-up: /' || true
