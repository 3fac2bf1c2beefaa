#!/usr/bin/env bash
# The test command: sets up (idempotently), then C++ unit tests and the Python suite.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
export TORCHTPU_TEST_PLUGIN="$(.venv/bin/python -c 'import os, xla_plugins.xla_cpu_pjrt as m; print(os.path.join(os.path.dirname(m.__file__), "xla_cpu_pjrt.so"))')"
# AOTAutograd's cache (PyTorch's cache folder) holds torchtpu's graph recipes keyed by the traced
# graph, not by torchtpu's code: a checkout keeps its own, so entries another checkout's code wrote
# are never replayed here. torchtpu's program cache is keyed by the program text and is shared.
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$root/build/torch-cache}"
echo "== clang-format"
clang-format --dry-run -Werror csrc/*/*.cpp csrc/*/*.h tests/cpp/*.cpp
echo "== C++ unit tests"
build/test_pjrt --gtest_brief=1
build/test_stablehlo --gtest_brief=1
build/test_lowering --gtest_brief=1
echo "== Python tests"
.venv/bin/python -m pytest -q -p no:cacheprovider tests/python "$@"
if [ $# -eq 0 ]; then
  # XLA:CPU generates code for the host's instruction set, and the CPU reference picks kernels by
  # it (ATen by ATEN_CPU_CAPABILITY, oneDNN, e.g. float32 gelu, by ONEDNN_MAX_CPU_ISA), so special
  # values can differ between machines (issue 14). The suite above ran with this host's ISA; the
  # special-value tests, whose oracles do not depend on it, run again as on an AVX2 machine.
  echo "== Special values as on an AVX2 machine"
  ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \
    XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_cpu_max_isa=AVX2" \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/test_nonfinite.py \
    "tests/python/test_complex_ops.py::test_special_values" \
    tests/python/test_elementwise.py -k "nonfinite or special or nan or activation_forward"
fi
