#!/usr/bin/env bash
# Idempotent: .venv-dist/ (Python 3.11) for the distributed framework demos
# (scripts/torchtitan_demo.sh, scripts/ray_demo.sh): the same torch 2.13.0+cpu as .venv, the
# xla-cpu-pjrt plugin, torchtitan 0.3.0 (+ triton, which it imports unconditionally), ray[train]
# 2.60.0, and torchtpu (this checkout, editable: the same _C*.so as .venv, built by
# scripts/setup_env.sh). Its own venv: torchtitan pins datasets<4.8 and brings triton, Ray brings
# its own server stack; none of that belongs in the main environment.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv=.venv-dist
source scripts/lib/side_venv.sh
if ! installed torchtitan 0.3.0 || ! installed ray 2.60.0 || ! installed torch 2.13.0+cpu \
   || ! installed triton 3.9.0; then
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/pip" install -q "torch==2.13.0" xla-cpu-pjrt "torchtitan==0.3.0" "triton==3.9.0" \
    "ray[train]==2.60.0"
fi
# torchtpu: same torch and Python as .venv, so the _C*.so that setup_env.sh built loads here.
bash scripts/link_checkout.sh "$venv"
