"""The `torch.backends` entry point of torchtpu: `import torch` imports torchtpu.

A module of its own, outside the `torchtpu` package, because torch turns any exception its
entry point raises into a failed `import torch`. Importing torchtpu can fail for reasons that
must not take torch down with it (a torchtpu built against another torch version, a broken
install): here they become one warning, and an explicit `import torchtpu` raises the error."""

from __future__ import annotations

import warnings


def autoload() -> None:
    try:
        import torchtpu  # noqa: F401
    except Exception as err:  # noqa: BLE001 - whatever it is, torch itself must still import
        warnings.warn(
            f"torchtpu was not loaded, so the tpu device is unavailable: {err}",
            RuntimeWarning,
            stacklevel=2,
        )
