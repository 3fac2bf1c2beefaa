#!/usr/bin/env bash
# Checks that torchtpu also builds against torch 2.11 on Python 3.12 (what the GPU machines have),
# beside the main torch 2.13 / Python 3.11 setup. Not part of the test run. Idempotent:
#   - a Python 3.12 venv ($TORCH211_VENV, default .venv-torch211/) with torch==2.11.0 from PyPI
#     (a CUDA build: its nvidia-* libraries are several GB, needed to import torch, not to build),
#   - the extension built in $TORCH211_BUILD (default build-torch211/) into
#     torchtpu/_C.cpython-312-*.so, beside the 3.11 one,
#   - a smoke test (x @ x on tpu) and a few test files ($TORCH211_TESTS) under that venv.
# TORCH211_BUILD_ONLY=1 installs torch without its nvidia-* dependencies and stops after the build.
# Both folders are git-ignored.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="${TORCH211_VENV:-$root/.venv-torch211}"
build="${TORCH211_BUILD:-$root/build-torch211}"
build_only="${TORCH211_BUILD_ONLY:-0}"
tests="${TORCH211_TESTS:-tests/python/test_device.py tests/python/test_elementwise.py tests/python/test_views.py tests/python/test_compile.py}"

if [ ! -x "$venv/bin/python" ]; then
  py312="$(command -v python3.12 || true)"
  [ -n "$py312" ] || py312="$(ls -d /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)"
  [ -n "$py312" ] || { echo "check_torch211: no python3.12 found" >&2; exit 1; }
  "$py312" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q)
if ! "$venv/bin/python" -c 'import importlib.metadata as m; assert m.version("torch").startswith("2.11.")' 2>/dev/null; then
  # torch's small pure-Python dependencies; the nvidia-* ones follow below unless build-only.
  "${pip[@]}" --no-deps "torch==2.11.0"
  "${pip[@]}" typing_extensions sympy networkx jinja2 filelock fsspec "setuptools<82"
fi
"${pip[@]}" xla-cpu-pjrt numpy pytest expecttest
if [ "$build_only" != 1 ] && ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  "${pip[@]}" "torch==2.11.0" # now with its dependencies: the CUDA runtime libraries it links
fi

echo "== build against torch 2.11 (Python 3.12) in $build"
TORCHTPU_BUILD_DIR="$build" PYTHON="$venv/bin/python" bash scripts/build.sh
ls torchtpu/_C.cpython-312-*.so
[ "$build_only" = 1 ] && exit 0
# Registers the entry points (torch.backends autoload, the "tpu" dynamo backend) in this venv.
bash scripts/link_checkout.sh "$venv"

echo "== smoke test"
plugin="$("$venv/bin/python" -c 'import os, xla_plugins.xla_cpu_pjrt as m; print(os.path.join(os.path.dirname(m.__file__), "xla_cpu_pjrt.so"))')"
export TORCHTPU_TEST_PLUGIN="$plugin"
(cd /tmp && "$venv/bin/python" -c "
import torch, torchtpu
x = torch.randn(4, 4, device='tpu')
assert torch.allclose((x @ x).cpu(), x.cpu() @ x.cpu(), atol=1e-5)
print('torch', torch.__version__, 'python 3.12: x @ x on tpu matches the CPU')")
echo "== tests"
# Two tests check what torch 2.11 itself does differently (docs/platforms.md, "Other torch versions").
known=(--deselect tests/python/test_elementwise.py::test_clamp_nan_propagation
  --deselect tests/python/test_compile.py::test_unsupported_graph_runs_eagerly_with_a_reason)
# shellcheck disable=SC2086
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${known[@]}" $tests "$@"
