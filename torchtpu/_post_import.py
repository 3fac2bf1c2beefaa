"""Run a function on a third-party module right after it is first imported.

torchtpu's small integrations with libraries that have no extension point for a new device
(Accelerate, safetensors) patch a module once it has executed. A module imported before
torchtpu is patched at `after_import` time instead; names other modules already copied out of it
with `from x import y` keep the original then, which is why torchtpu installs these hooks when
it is imported, and torch imports torchtpu (the device backend autoload) before any library that
imports torch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Callable, Dict

_patches: Dict[str, Callable] = {}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        patch = _patches.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            patch(module)

        loader.exec_module = exec_module
        return spec


def after_import(name: str, patch: Callable) -> None:
    """Calls patch(module) once module `name` has executed (now, if it already has)."""
    _patches[name] = patch
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
    if not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())
