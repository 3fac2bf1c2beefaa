#!/usr/bin/env bash
# Ray Train on tpu: a TorchTrainer with 2 workers, each on its own tpu device (custom Ray
# resource "tpu_device"), TorchConfig(backend="tpu"), DDP on a small MLP; the losses Ray reports
# must equal one CPU process on the full batch (scripts/dist_demos/ray_train.py).
#
#   bash scripts/ray_demo.sh            # STEPS=8 by default
#
# Ray runs a local cluster (GCS, raylet) on 127.0.0.1 for the length of the script; it is shut
# down by the script (and bounded by a timeout).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ "${TORCHTPU_DIST_SETUP_DONE:-0}" = 1 ] || bash scripts/setup_dist_demos.sh
export RAY_ADDRESS=local RAY_USAGE_STATS_ENABLED=0 RAY_DEDUP_LOGS=0
log="$(mktemp /tmp/ray_demo.XXXXXX.log)"
trap 'rm -f "$log"' EXIT
echo "== Ray Train TorchTrainer, 2 workers on tpu (backend tpu) vs one CPU process"
if ! timeout --kill-after=20 "${RAY_DEMO_TIMEOUT:-900}" .venv-dist/bin/python scripts/dist_demos/ray_train.py \
     --steps "${STEPS:-8}" >"$log" 2>&1; then
  echo "ray_demo: failed; the log's end:"
  tail -n 60 "$log"
  exit 1
fi
grep -E '^\{"backend"|^step [0-9]+:|^ray_demo:' "$log"
