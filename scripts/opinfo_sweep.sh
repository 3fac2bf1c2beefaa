#!/usr/bin/env bash
# The full OpInfo conformance sweep (slow: every OpInfo of torch's op_db x 6 dtypes). Not part of
# scripts/test.sh; the fast subset is tests/python/test_opinfo_subset.py. Extra arguments go to
# the harness, e.g. `scripts/opinfo_sweep.sh --dtypes float32` or `--ops add,mul --summary -`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# `python -m torchtpu.<module>` imports torchtpu before torch; torch's backend autoload would then
# re-enter the half-imported torchtpu. torchtpu registers itself when imported, so skip autoload.
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
exec nice -n 10 .venv/bin/python -m torchtpu.testing.opinfo \
    --out docs/opinfo_report.json --summary docs/OPINFO.md "$@"
