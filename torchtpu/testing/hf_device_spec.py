"""The device spec that Transformers' and Diffusers' own test suites read to run on tpu.

Both suites take a custom device from three variables (Diffusers spells them DIFFUSERS_TEST_*):

    TRANSFORMERS_TEST_DEVICE=tpu            # their `torch_device`
    TRANSFORMERS_TEST_BACKEND=torchtpu      # imported first: registers the device
    TRANSFORMERS_TEST_DEVICE_SPEC=<file>    # this module: seeding, cache, count, memory stats

They import the spec by stripping ".py" from the variable's value and importing what is left, so
the value must be a file name relative to the working directory (a path with a folder in it
does not import). Run this module from the suite's source tree to write that file there, a
one-line shim importing this module:

    cd transformers && python -m torchtpu.testing.hf_device_spec
    # writes ./torchtpu_device_spec.py and prints the variables to set

Names are those the suites look up (each falls back to their `default` entry when absent).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import torchtpu  # noqa: F401  (registers torch.tpu)

DEVICE_NAME = "tpu"

MANUAL_SEED_FN = torch.tpu.manual_seed
EMPTY_CACHE_FN = torch.tpu.empty_cache
DEVICE_COUNT_FN = torch.tpu.device_count

# Diffusers also asks these.
SUPPORTS_TRAINING = True
RESET_PEAK_MEMORY_STATS_FN = torch.tpu.reset_peak_memory_stats
RESET_MAX_MEMORY_ALLOCATED_FN = torch.tpu.reset_peak_memory_stats
MAX_MEMORY_ALLOCATED_FN = torch.tpu.max_memory_allocated

SHIM_NAME = "torchtpu_device_spec.py"
SHIM_TEXT = ('"""Written by `python -m torchtpu.testing.hf_device_spec`: the tpu device spec for '
             'Transformers/Diffusers tests."""\n'
             "from torchtpu.testing.hf_device_spec import *  # noqa: F401,F403\n")


def write_shim(directory: str | Path = ".") -> Path:
    """Writes the one-line spec file the suites can import into `directory`; returns its path."""
    path = Path(directory) / SHIM_NAME
    path.write_text(SHIM_TEXT)
    return path


def environment(prefix: str = "TRANSFORMERS") -> dict[str, str]:
    """The variables that select tpu for a suite; prefix "TRANSFORMERS" or "DIFFUSERS"."""
    if prefix not in ("TRANSFORMERS", "DIFFUSERS"):
        raise ValueError(f"prefix must be 'TRANSFORMERS' or 'DIFFUSERS', got {prefix!r}")
    return {f"{prefix}_TEST_DEVICE": DEVICE_NAME, f"{prefix}_TEST_BACKEND": "torchtpu",
            f"{prefix}_TEST_DEVICE_SPEC": SHIM_NAME}


def main(argv: list[str]) -> int:
    directory = argv[0] if argv else "."
    path = write_shim(directory)
    print(f"# wrote {path}; from {Path(directory).resolve()} run the suite with:")
    for prefix in ("TRANSFORMERS", "DIFFUSERS"):
        print("export " + " ".join(f"{k}={v}" for k, v in environment(prefix).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
