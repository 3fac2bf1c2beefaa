#!/usr/bin/env bash
# Usage: scripts/device_check.sh OUTDIR
#
# One prepared check of torchtpu on the machine it runs on (issue 29): builds torchtpu against the
# Python and torch it finds (no downloads), selects the platform's PJRT plugin, runs the demo, a
# test subset and the accelerator benchmarks, and writes JSON lines plus summary.md into OUTDIR.
# On an NVIDIA machine it picks the CUDA PJRT plugin (JAX's jax-cuda13-pjrt, or xla-cuda13-pjrt);
# TORCHTPU_PLATFORM=cpu runs the same steps on the XLA CPU plugin with reduced sizes (CI does).
#
#   PYTHON=...                 the interpreter (default: .venv/bin/python here, else python3)
#   TORCHTPU_PLATFORM=cuda|cpu (default: cuda where nvidia-smi answers, else cpu)
#   TORCHTPU_BUILD_DIR=...     the build folder (default: /tmp/torchtpu-device-build-<python tag>)
#   DEVICE_CHECK_TESTS="..."   pytest targets instead of the default subset
#   DEVICE_CHECK_PEAKS="TFLOPS GBPS"  the card's bf16 dense peak and memory bandwidth (H100 SXM:
#                              "989 3350"; H200: "989 4800"), for fraction-of-peak figures
#
# The PJRT C API header: from the Python's xla-cpu-pjrt wheel, else $TORCHTPU_PJRT_INCLUDE_DIR,
# else build/pjrt_include/ (made here by `scripts/device_check.sh --prepare`, which copies the
# header out of .venv's xla-cpu-pjrt so it can travel with the tree to a machine without network).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if [ "${1:-}" = "--prepare" ]; then
  inc="$(.venv/bin/python -c 'import os, xla_plugins.xla_cpu_pjrt as m; print(os.path.join(os.path.dirname(m.__file__), "include"))')"
  mkdir -p build/pjrt_include && cp "$inc/pjrt_c_api.h" build/pjrt_include/
  echo "build/pjrt_include/pjrt_c_api.h ready (carry build/pjrt_include to the device machine)"
  exit 0
fi
out="${1:?usage: scripts/device_check.sh OUTDIR | --prepare}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
start=$(date +%s)

py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py="$root/.venv/bin/python"; else py="$(command -v python3)"; fi
fi
platform="${TORCHTPU_PLATFORM:-}"
if [ -z "$platform" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    platform=cuda
  else
    platform=cpu
  fi
fi
export TORCHTPU_PLATFORM="$platform"
tag="$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
log="$out/device_check.log"
: >"$log"
say() { echo "== $*" | tee -a "$log"; }
say "platform $platform, python $("$py" -c 'import sys; print(sys.version.split()[0])'), $(nproc) cores"

# --- build (no downloads) ---
include="${TORCHTPU_PJRT_INCLUDE_DIR:-}"
if [ -z "$include" ]; then
  include="$("$py" -c 'import os, importlib.util as u; s = u.find_spec("xla_plugins"); print(os.path.join(s.submodule_search_locations[0], "xla_cpu_pjrt", "include") if s else "")' 2>/dev/null || true)"
fi
if [ -z "$include" ] || [ ! -f "$include/pjrt_c_api.h" ]; then include="$root/build/pjrt_include"; fi
if [ ! -f "$include/pjrt_c_api.h" ]; then
  echo "device_check: no pjrt_c_api.h (install xla-cpu-pjrt, set TORCHTPU_PJRT_INCLUDE_DIR, or run" \
    "scripts/device_check.sh --prepare where it is installed)" >&2
  exit 2
fi
if [ "$py" = "$root/.venv/bin/python" ] && [ -z "${TORCHTPU_BUILD_DIR:-}" ]; then
  build="$root/build"  # the developers' build of this venv: nothing to rebuild
else
  build="${TORCHTPU_BUILD_DIR:-/tmp/torchtpu-device-build-$tag}"
fi
say "build into $build"
b0=$(date +%s)
PYTHON="$py" TORCHTPU_BUILD_DIR="$build" TORCHTPU_PJRT_INCLUDE_DIR="$include" \
  TORCHTPU_BUILD_JOBS="${TORCHTPU_BUILD_JOBS:-$(nproc)}" bash scripts/build.sh >>"$log" 2>&1
say "built in $(($(date +%s) - b0)) s"

# Run from the checkout with its sources first (no install needed); torch's backend autoload is
# what an installed torchtpu would add, so the driver imports torchtpu itself.
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export TORCHINDUCTOR_CACHE_DIR="$out/torch-cache" TORCHTPU_CACHE_DIR="$out/torchtpu-cache"
"$py" scripts/device_check.py "$out" 2>&1 | tee -a "$log"
say "device check finished in $(($(date +%s) - start)) s: $out/summary.md"
