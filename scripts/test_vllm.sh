#!/usr/bin/env bash
# vLLM on tpu through the torchtpu_vllm plugin (its own venv: vLLM pins transformers<5.20).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup_vllm.sh
echo "== vLLM plugin tests"
.venv-vllm/bin/python -m pytest -q -p no:cacheprovider integrations/vllm/tests "$@"
echo "== vllm serve on tpu (OpenAI HTTP API, bad request -> 4xx, keeps serving)"
TORCHTPU_VLLM_SETUP_DONE=1 bash scripts/vllm_demo.sh
echo "== examples/vllm_offline.py"
.venv-vllm/bin/python examples/vllm_offline.py --tokens 8
