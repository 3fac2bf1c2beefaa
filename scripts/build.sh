#!/usr/bin/env bash
# The developers' build (packaging builds wheels through pyproject.toml: scikit-build-core).
# Configures (once) and builds the C++ parts into build/, the extension into torchtpu/_C*.so.
# Concurrent callers queue on a lock, since two ninjas in one build folder corrupt it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
build="${TORCHTPU_BUILD_DIR:-$root/build}"
export CCACHE_NOHASHDIR=1 CCACHE_BASEDIR="$root"
mkdir -p "$build"
exec 9>"$build/.lock"
flock 9
pjrt_include() {  # TORCHTPU_PJRT_INCLUDE_DIR, else the venv's xla-cpu-pjrt wheel
  [ -n "${TORCHTPU_PJRT_INCLUDE_DIR:-}" ] && { echo "$TORCHTPU_PJRT_INCLUDE_DIR"; return; }
  "$py" -c 'import os, xla_plugins.xla_cpu_pjrt as m; print(os.path.join(os.path.dirname(m.__file__), "include"))'
}
if [ ! -f "$build/build.ninja" ]; then
  # CMakeLists.txt finds torch through $py (without importing it).
  cmake -S "$root" -B "$build" -G Ninja -DPJRT_INCLUDE_DIR="$(pjrt_include)" \
    -DPython3_EXECUTABLE="$py" >/dev/null
elif grep -qs '^SKBUILD' "$build/CMakeCache.txt"; then
  # A wheel built in this folder (pip wheel ., whose build-dir is build/) left scikit-build-core's
  # settings in the cache, and perhaps the Python of an isolated build environment that no longer
  # exists: this becomes a developer build of $py again (outputs in torchtpu/; ccache serves the
  # objects compiled before).
  cmake "$build" -USKBUILD* -DPJRT_INCLUDE_DIR="$(pjrt_include)" -DPython3_EXECUTABLE="$py" \
    >/dev/null
fi
cmake --build "$build" -j"${TORCHTPU_BUILD_JOBS:-2}" "$@"
