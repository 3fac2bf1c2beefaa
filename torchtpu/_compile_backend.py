"""backend="tpu" in Dynamo's registry from the moment torchtpu loads.

Dynamo finds a backend named by a string through `torch._dynamo.backends.registry.lookup_backend`,
which, for a name only known from a `torch_dynamo_backends` entry point, loads the entry point and
registers what it loaded. That lookup is not thread-safe: threads that call
`torch.compile(fn, backend="tpu")` for the first time at once all see the name unregistered, all
register it, and all but one raise `AssertionError: duplicate name: tpu` (issue 32). So torchtpu
registers "tpu" itself, when the registry module has loaded (at once if it has: torchtpu imports
Dynamo today; through torchtpu._post_import if it has not), and the lookup never reaches the entry
point. What is registered is `tpu` below, which imports torchtpu._dynamo and builds the AOTAutograd
backend (0.2-0.3 s of imports) only when Dynamo first hands it a graph.

The entry point stays for a process that loads torchtpu through it (TORCH_DEVICE_BACKEND_AUTOLOAD=0
and no `import torchtpu` before the first torch.compile): the lookup that loads it registers the
loaded backend, so torchtpu must not register the name during that load.
"""

from __future__ import annotations

import sys

from . import _post_import

_REGISTRY = "torch._dynamo.backends.registry"


def tpu(gm, example_inputs, **kwargs):
    """torch.compile(model, backend="tpu"): see torchtpu._dynamo."""
    from ._dynamo import tpu_backend

    return tpu_backend(gm, example_inputs, **kwargs)


def _inside_lookup(registry) -> bool:
    # True while this thread is in lookup_backend (loading our entry point imported torchtpu).
    code = registry.lookup_backend.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _register(registry) -> None:
    if "tpu" in registry._COMPILER_FNS or _inside_lookup(registry):
        return
    registry.register_backend(compiler_fn=tpu, name="tpu")


def install() -> None:
    _post_import.after_import(_REGISTRY, _register)
