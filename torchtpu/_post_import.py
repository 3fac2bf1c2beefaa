"""Run a function on a third-party module right after it is first imported.

torchtpu's small integrations with libraries that have no extension point for a new device
(Accelerate, safetensors) patch a module once it has executed. A module imported before
torchtpu is patched at `after_import` time instead; names other modules already copied out of it
with `from x import y` keep the original then, which is why torchtpu installs these hooks when
it is imported, and torch imports torchtpu (the device backend autoload) before any library that
imports torch.

A module can also be in the middle of executing when torchtpu is imported: `import accelerate`
first runs accelerate/accelerator.py, whose `import torch` autoloads torchtpu before the module
has defined `Accelerator`. Patching it then raised AttributeError out of torch's autoload, so
`import accelerate` (and `accelerate launch`) failed whenever it came before `import torch`; a
patch that checks for a name (safetensors.torch) silently did nothing. Such a module is patched
once it has finished: at the next import that reaches the finder below (the importing package
goes on importing its other submodules), or when an integration calls flush() before it relies
on its patch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Callable, Dict

_patches: Dict[str, Callable] = {}
# Modules that were still executing when their patch was registered: name -> patch.
_pending: Dict[str, Callable] = {}


def _initializing(module) -> bool:
    # importlib sets spec._initializing while it executes a module (it is how Python words its
    # "partially initialized module" errors).
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def flush() -> None:
    """Patches the pending modules that have finished executing."""
    for name, patch in list(_pending.items()):
        module = sys.modules.get(name)
        if module is None:
            del _pending[name]  # its import failed; a new import goes through the finder
        elif not _initializing(module):
            del _pending[name]
            patch(module)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if _pending:
            flush()
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
        if _initializing(module):
            _pending[name] = patch
        else:
            patch(module)
    if not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())
