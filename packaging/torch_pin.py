"""scikit-build-core metadata provider: the wheel's `dependencies`, with torch pinned to the
minor version in the build environment. torchtpu/_C links that torch's C++ libraries, whose ABI
changes between minor releases; an unpinned requirement lets pip pair the wheel with a torch it
cannot load (the undefined-symbol failures TorchTPU's users report)."""

from __future__ import annotations

import importlib.metadata

__all__ = ["dynamic_metadata"]


def __dir__() -> list[str]:
    return __all__


def built_against() -> str:
    """`major.minor` of the torch this build compiles against (no local tag such as +cpu)."""
    version = importlib.metadata.version("torch").split("+")[0]
    major, minor = version.split(".")[:2]
    return f"{major}.{minor}"


def dynamic_metadata(field: str, settings: dict | None = None) -> list[str]:
    if field != "dependencies":
        raise ValueError(f"torch_pin provides only 'dependencies', not {field!r}")
    return [f"torch=={built_against()}.*", "numpy"]
