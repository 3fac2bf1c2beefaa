# Sourced by scripts/setup_vllm.sh and scripts/setup_dist_demos.sh (from the checkout's root) with
# $venv set: a side venv beside .venv for frameworks whose pins do not fit the main environment.
# Builds torchtpu first when its extension is missing (scripts/setup_env.sh: the side venvs link
# the same _C*.so, same torch and Python), makes $venv with PYTHON_BIN (default python3.11, else
# python3), and defines
#   installed PACKAGE VERSION: whether $venv has that exact version, from package metadata only
#   (importing vllm, ray or torchtitan takes seconds to tens of seconds).
ls torchtpu/_C*.so >/dev/null 2>&1 || bash scripts/setup_env.sh
py="${PYTHON_BIN:-python3.11}"
command -v "$py" >/dev/null || py=python3
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
installed() {
  "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null
}
