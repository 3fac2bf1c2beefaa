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
  # The suite above ran as this host's processor family. XLA:CPU generates code for the host's
  # instruction sets, and the CPU reference picks kernels by them (ATen by ATEN_CPU_CAPABILITY,
  # oneDNN by ONEDNN_MAX_CPU_ISA), so results and even error messages can differ between machines
  # (issues 14 and 32). The precision-sensitive tests run again as on other families. Each setting
  # can only lower a level, never raise it: ATen takes "avx512" on a host without AVX-512 and then
  # dies of SIGILL in its first AVX-512 kernel, oneDNN and XLA cap a higher request at the host's
  # own level. So only the families below this host's can be emulated; and PyTorch's choices made
  # from cpuinfo, not from these settings (the oneDNN fp8 _scaled_mm of AMX hosts), follow the
  # real host whatever is set (tests must not take their oracle from those: test_float8.py).
  # XLA's SSE4_2 level cannot compile half-precision programs (it needs F16C; "Symbols not found:
  # __extendhfsf2"), so the oldest family runs XLA at AVX.
  #   family       ATen     oneDNN                 XLA       cpuinfo flag that marks the family
  isa_families=(
    "amx-fp16     avx512   AVX512_CORE_AMX_FP16   AMX_FP16      amx_fp16"
    "amx          avx512   AVX512_CORE_AMX        AMX           amx_tile"
    "avx512-fp16  avx512   AVX512_CORE_FP16       AVX512_BF16   avx512_fp16"
    "avx512-bf16  avx512   AVX512_CORE_BF16       AVX512_BF16   avx512_bf16"
    "avx512       avx512   AVX512_CORE            AVX512        avx512f"
    "avx2         avx2     AVX2                   AVX2          avx2"
    "pre-avx2     default  SSE41                  AVX           sse4_2"
  )
  # The precision-sensitive files (test_linalg_decomp.py, LAPACK against tolerances and the
  # slowest of them, is left out). Each emulated run costs about what these files cost natively.
  isa_tests=(tests/python/test_float8.py tests/python/test_nonfinite.py
             tests/python/test_special.py tests/python/test_complex_ops.py
             tests/python/test_complex.py tests/python/test_elementwise.py
             tests/python/test_linalg_shape.py tests/python/test_large_mean_statistics.py
             tests/python/test_compile_effort.py::test_quick_programs_compute_the_bits_of_full_effort_ones)
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  host=""
  below=()
  for f in "${isa_families[@]}"; do
    read -r name _ _ _ flag <<< "$f"
    if [ -z "$host" ]; then
      [[ "$flags" == *" $flag "* ]] && host="$name"
    else
      below+=("$name")
    fi
  done
  # Within CI's time: the family just below this host's, and AVX2 (the commonest machine) when
  # the host is above it. TORCHTPU_TEST_ISAS=all runs every family below; a list picks some.
  want="${TORCHTPU_TEST_ISAS:-}"
  if [ -z "$want" ]; then
    want="${below[0]:-}"
    [[ " ${below[*]} " == *" avx2 "* && "$want" != avx2 ]] && want="$want avx2"
  elif [ "$want" = all ]; then
    want="${below[*]}"
  fi
  echo "== This host: ${host:-unknown} family; emulated: ${want:-none}" \
    "(families above the host's cannot be emulated)"
  for f in "${isa_families[@]}"; do
    read -r name aten onednn xla _ <<< "$f"
    [[ " $want " == *" $name "* && " ${below[*]} " == *" $name "* ]] || continue
    echo "== Precision-sensitive tests as on the $name family" \
      "(ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn --xla_cpu_max_isa=$xla)"
    ATEN_CPU_CAPABILITY="$aten" ONEDNN_MAX_CPU_ISA="$onednn" \
      XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_cpu_max_isa=$xla" \
      .venv/bin/python -m pytest -q -p no:cacheprovider "${isa_tests[@]}"
  done
fi
