#!/usr/bin/env bash
# The test command: sets up (idempotently), then C++ unit tests and the Python suite.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
export TORCHTPU_TEST_PLUGIN="$(.venv/bin/python -c 'import os, xla_plugins.xla_cpu_pjrt as m; print(os.path.join(os.path.dirname(m.__file__), "xla_cpu_pjrt.so"))')"
echo "== clang-format"
clang-format --dry-run -Werror csrc/*/*.cpp csrc/*/*.h tests/cpp/*.cpp
echo "== C++ unit tests"
build/test_pjrt --gtest_brief=1
build/test_stablehlo --gtest_brief=1
echo "== Python tests"
.venv/bin/python -m pytest -q -p no:cacheprovider tests/python "$@"
