#!/usr/bin/env bash
# The wheel a user installs: built the standard way (PEP 517, scikit-build-core), tagged manylinux
# by auditwheel, installed with its [cpu] extra into a fresh virtual environment (no source tree on
# the path, no compiler), then the demo and the packaging tests run against it from outside the
# checkout. Reuses the developers' build folder (build/): the wheel links and packages, it does not
# compile again. Leaves the wheel in build/dist/ and its environment in build/wheel-venv/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
ls torchtpu/_C*.so >/dev/null 2>&1 || bash scripts/setup_env.sh
py=.venv/bin/python
dist=build/dist
rm -rf "$dist" && mkdir -p "$dist"
export CCACHE_NOHASHDIR=1 CCACHE_BASEDIR="$root"
start=$(date +%s)
echo "== pip wheel (scikit-build-core, --no-build-isolation: this venv's torch)"
"$py" -m pip wheel . --no-deps --no-build-isolation -q -w "$dist/raw"
raw=$(ls "$dist"/raw/torchtpu-*.whl)
# auditwheel grafts no library: torch's come from the torch wheel the metadata pins (--exclude), the
# PJRT plugin is loaded at run time. What is left links only the system's C/C++ runtime.
PATH="$root/.venv/bin:$PATH" "$py" -m auditwheel repair "$raw" -w "$dist" --exclude 'libtorch*.so' --exclude 'libc10.so' \
  2>&1 | grep -E 'tags|written' || true
whl=$(ls "$dist"/torchtpu-*manylinux*.whl)
echo "== $(basename "$whl"): $(du -h "$whl" | cut -f1), built in $(($(date +%s) - start)) s"
# Back to a developer build (the wheel left scikit-build-core's settings in build/).
bash scripts/build.sh >/dev/null

venv=build/wheel-venv
rm -rf "$venv"
"${PYTHON_BIN:-python3.11}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
# torch==2.13.0 first: the wheel asks for torch==2.13.*, which this machine has on disk as 2.13.0.
"$venv/bin/pip" install -q "torch==2.13.0"
"$venv/bin/pip" install -q "$whl[cpu]" pytest
outside=$(mktemp -d)
trap 'rm -rf "$outside"' EXIT
cp examples/train_mlp.py "$outside/"
cd "$outside"
echo "== the installed wheel, from outside the checkout"
"$root/$venv/bin/python" - <<'PY'
import importlib.metadata as m, os, torch, torchtpu
assert "site-packages" in torchtpu.__file__, torchtpu.__file__
print(f"torchtpu {torchtpu.__version__} at {os.path.dirname(torchtpu.__file__)}, built against "
      f"torch {torchtpu.__torch_version__}, torch {torch.__version__}; requires "
      f"{[r for r in m.requires('torchtpu') if 'extra' not in r]}")
PY
"$root/$venv/bin/python" train_mlp.py --steps 8 --max-diff 1e-4
"$root/$venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir "$outside" \
  "$root/tests/python/test_packaging.py" "$root/tests/python/test_device.py"
