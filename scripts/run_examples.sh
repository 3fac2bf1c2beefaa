#!/usr/bin/env bash
# Runs every example in examples/ as a smoke test (small sizes, each bounded in time), so examples
# never rot; CI runs it. Each example checks its own result against the CPU and exits non-zero when
# it differs. The vLLM examples run in scripts/test_vllm.sh (their own venv).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
ls torchtpu/_C*.so >/dev/null 2>&1 || bash scripts/setup_env.sh
py=.venv/bin/python
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
run() {  # name, timeout (s), command...
  local name="$1" limit="$2"
  shift 2
  local start=$SECONDS
  if ! timeout "$limit" "$@" >"build/example-$name.log" 2>&1; then
    echo "== example $name FAILED (see build/example-$name.log):" >&2
    tail -20 "build/example-$name.log" >&2
    exit 1
  fi
  echo "== example $name ok in $((SECONDS - start)) s: $(grep -v '^I0000\|^WARNING' \
    "build/example-$name.log" | tail -1)"
}
mkdir -p build
run train_mlp 300 "$py" examples/train_mlp.py --steps 5 --max-diff 1e-4
run compile_train_step 600 "$py" examples/compile_train_step.py --steps 3
run hf_trainer_finetune 600 "$py" examples/hf_trainer_finetune.py --steps 4
run diffusers_compiled_unet 600 "$py" examples/diffusers_compiled_unet.py --steps 2
run custom_kernel 300 "$py" examples/custom_kernel.py
run profile_trace 300 "$py" examples/profile_trace.py --out build/example-trace.json
for mode in ddp fsdp; do
  run "torchrun_$mode" 600 env TORCHTPU_CPU_DEVICE_COUNT=1 GLOO_SOCKET_IFNAME=lo \
    .venv/bin/torchrun --nproc-per-node 2 examples/ddp_fsdp_torchrun.py --mode "$mode" --steps 3
done
