#!/usr/bin/env bash
# The layering rules of csrc/, checked before the lowering library compiles (CMake target
# check_layering) so that breaking one fails the build with a message naming the rule. The
# include paths enforce the first rule by construction too (the lowering library's include
# folder holds only lowering/, stablehlo/, config/ and util/); this check names it and also
# catches relative paths ("../aten/x.h") that an include path cannot stop.
#   - lowering/ (aten op -> StableHLO) includes only lowering/, stablehlo/, config/ and util/
#     headers of torchtpu: never aten/, runtime/ or another execution layer, nor PJRT. The
#     platform arrives in the LoweringContext; eager kernels call lowerings, never the reverse;
#   - lowering/ registers no dispatcher kernels (TORCH_LIBRARY*): that glue lives in aten/;
#   - lowering/ emits StableHLO through FunctionBuilder's typed methods, never a raw
#     op("stablehlo.…") / op_multi("stablehlo.…") with hand-written attribute text;
#   - no lowering helper is defined in two files (scripts/check_lowering_helpers.py);
#   - pjrt/, stablehlo/ and util/ include no torch headers (they build and test without torch);
#   - the engine (exec/, runtime/, device/) includes nothing from aten/, distributed/, profiler/
#     or python/: registrations call the engine, never the reverse (its include folder enforces
#     it too: CMake target torchtpu_engine).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
report() {
  if [ -n "$2" ]; then
    echo "check_layering: $1:" >&2
    echo "$2" >&2
    fail=1
  fi
}
report "lowering/ includes a torchtpu header outside lowering/, stablehlo/, config/ and util/ (pass what it needs through LoweringContext)" \
  "$(grep -nE '^\s*#\s*include\s*"' csrc/lowering/*.cpp csrc/lowering/*.h |
     grep -vE '#\s*include\s*"(lowering|stablehlo|config|util)/[A-Za-z0-9_]+\.h"' || true)"
report "lowering/ registers dispatcher kernels (move them to csrc/aten/)" \
  "$(grep -nE '^\s*TORCH_LIBRARY(_IMPL|_FRAGMENT)?\(|#include <torch/library.h>' \
     csrc/lowering/*.cpp csrc/lowering/*.h || true)"
report "pjrt/, stablehlo/ or util/ includes a torch header" \
  "$(grep -nE '#include <(ATen|c10|torch)/' -r csrc/pjrt csrc/stablehlo csrc/util || true)"
report "the engine (exec/, runtime/, device/) includes a header of a layer above it (aten/, distributed/, profiler/, python/)" \
  "$(grep -nE '^\s*#\s*include\s*"([./]*/)?(aten|distributed|profiler|python)/' \
     csrc/exec/*.cpp csrc/exec/*.h csrc/runtime/*.cpp csrc/runtime/*.h csrc/device/*.cpp \
     csrc/device/*.h || true)"
report "lowering/ emits a raw StableHLO op (add or use a typed FunctionBuilder method with an attribute struct)" \
  "$(grep -zoE '\bop(_multi)?\(\s*"stablehlo\.[a-z_]+"' csrc/lowering/*.cpp csrc/lowering/*.h |
     tr '\0' '\n' || true)"
python3 scripts/check_lowering_helpers.py || fail=1
exit "$fail"
