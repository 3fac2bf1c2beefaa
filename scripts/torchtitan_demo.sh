#!/usr/bin/env bash
# TorchTitan (PyPI torchtitan 0.3.0, its own trainer) trains the llama3 debug model with FSDP2 on 2
# tpu ranks (torchrun, c10d backend "tpu"), and the same run on CPU/gloo; each step's loss must
# match and fall. Everything it reads is made here: a byte-level BPE tokenizer and a small text
# data set (scripts/dist_demos/make_titan_assets.py), and a seed checkpoint (TorchTitan's own
# --checkpoint.create_seed_checkpoint on one CPU process) that both runs load, so they start
# from the same weights (random init on tpu and on CPU draws different numbers).
#
#   bash scripts/torchtitan_demo.sh            # STEPS=4 SEQ_LEN=64 by default
#   TP=2 bash scripts/torchtitan_demo.sh       # 4 ranks: FSDP2 (2) x tensor parallel (2)
#
# Each process sees one tpu device (TORCHTPU_CPU_DEVICE_COUNT=1 on the CPU plugin). See
# scripts/dist_demos/titan_train.py for the two adaptations (SDPA attention, CPU device module).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ "${TORCHTPU_DIST_SETUP_DONE:-0}" = 1 ] || bash scripts/setup_dist_demos.sh
steps="${STEPS:-4}"
tp="${TP:-1}"  # TP=2: a 2-D mesh on 4 ranks, FSDP2 (2) x tensor parallel (2); not run in CI
nproc=$((2 * tp))
seq_len="${SEQ_LEN:-64}"
work="$(mktemp -d /tmp/torchtitan_demo.XXXXXX)"
trap '[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$work"' EXIT
py=.venv-dist/bin/python
export OMP_NUM_THREADS=1 TORCHTPU_CPU_DEVICE_COUNT=1
"$py" scripts/dist_demos/make_titan_assets.py "$work/assets"
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
titan() {  # titan DEVICE NPROC LOG ARGS...: one bounded torchrun of TorchTitan's trainer
  local device="$1" nproc="$2" log="$3"
  shift 3
  local autoload=1
  [ "$device" = cpu ] && autoload=0  # the CPU reference runs without torchtpu imported
  TITAN_DEVICE="$device" TORCH_DEVICE_BACKEND_AUTOLOAD="$autoload" \
    timeout --kill-after=10 "${TITAN_TIMEOUT:-400}" .venv-dist/bin/torchrun --nproc_per_node "$nproc" \
    --master_addr 127.0.0.1 --master_port "$(free_port)" \
    scripts/dist_demos/titan_train.py --module llama3 --config llama3_debugmodel_sdpa \
    --hf_assets_path "$work/assets/tokenizer" --dataloader.dataset_path "$work/assets/c4_test" \
    --training.seq_len "$seq_len" --training.local_batch_size 2 --training.steps "$steps" \
    --training.disable_cuda_graphs --training.mixed_precision_param float32 \
    --parallelism.spmd_backend partial_dtensor --debug.seed 42 --metrics.log_freq 1 \
    "$@" >"$log" 2>&1 || { echo "torchtitan_demo: the $device run failed; its log:"; tail -n 60 "$log"; exit 1; }
}
echo "== TorchTitan seed checkpoint (1 CPU process)"
titan cpu 1 "$work/seed.log" --parallelism.data_parallel_shard_degree 1 \
  --checkpoint.enable --checkpoint.create_seed_checkpoint --dump_folder "$work/seed"
load=(--parallelism.data_parallel_shard_degree 2 --parallelism.tensor_parallel_degree "$tp"
      --checkpoint.enable
      --checkpoint.initial_load_path "$work/seed/checkpoint/step-0" --checkpoint.interval 100000)
echo "== TorchTitan llama3 debug model, FSDP2 (x TP $tp) on $nproc tpu ranks (backend tpu)"
titan tpu "$nproc" "$work/tpu.log" "${load[@]}" --dump_folder "$work/tpu"
grep -q "Loading the checkpoint from $work/seed" "$work/tpu.log"
grep -m1 "titan_train: init_process_group" "$work/tpu.log"
grep -q "init_process_group(backend='tpu" "$work/tpu.log"
echo "== the same on $nproc CPU ranks (gloo)"
titan cpu "$nproc" "$work/cpu.log" "${load[@]}" --dump_folder "$work/cpu"
"$py" scripts/dist_demos/compare_titan_losses.py "$work/tpu.log" "$work/cpu.log" "$steps"
