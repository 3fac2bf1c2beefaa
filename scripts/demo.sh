#!/usr/bin/env bash
# The main job: set up (idempotently), then train a small model on tpu (XLA:CPU by default).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
.venv/bin/python examples/train_mlp.py "$@"
