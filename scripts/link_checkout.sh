#!/usr/bin/env bash
# Usage: scripts/link_checkout.sh VENV
# Makes this checkout's torchtpu importable from VENV as an editable install (Python files and the
# extension the developer build put into torchtpu/), with its entry points registered: the
# torch.backends autoload and Dynamo's "tpu" backend. Builds nothing: scripts/build.sh is the
# developers' build, and VENV must have the torch (and Python) that build was made against.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$1"
if ! "$venv/bin/python" -c "import scikit_build_core" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q "scikit-build-core>=0.11"
fi
# wheel.cmake=false: the editable wheel carries the metadata and the checkout's folder only
# (editable.mode=inplace: the checkout goes on sys.path through a .pth file).
"$venv/bin/python" -m pip install -q --no-build-isolation --no-deps -Cwheel.cmake=false \
  -Ceditable.mode=inplace -e "$root" >/dev/null
# The .pth also installs scikit-build-core's import hook, which resolves torchtpu before sys.path is
# searched; without it sys.path's order holds, so PYTHONPATH=<another checkout> (a git worktree)
# imports that checkout's torchtpu from the same venv.
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
sed -i '/^import _editable_skbc_torchtpu$/d' "$site/_editable_skbc_torchtpu.pth"
