"""torchtpu: an XLA device (TPU, XLA:GPU, XLA:CPU through PJRT) as a native PyTorch device.

    import torch, torchtpu
    x = torch.randn(4, 4, device="tpu")
"""

from __future__ import annotations


def _autoload() -> None:
    """The `torch.backends` entry point: `import torch` imports torchtpu. Defined before
    `import torch` below, because importing torchtpu first makes torch call it while this
    module is still initializing. Never raises; a missing plugin only makes
    torch.tpu.is_available() False."""


import torch  # noqa: E402

from . import _C  # noqa: E402
from ._plugin import find_plugin
from .metrics import metrics, metrics_report, reset_metrics

__all__ = ["metrics", "metrics_report", "reset_metrics", "is_available", "device_count"]
__version__ = "0.1.0"


def _register() -> None:
    path, error = find_plugin()
    _C._configure(path, error)
    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
    from . import device as _device_module

    # TPUs compute in bfloat16 natively: it is autocast's default dtype on tpu.
    torch.set_autocast_dtype("tpu", torch.bfloat16)
    if not hasattr(torch, "tpu"):
        torch._register_device_module("tpu", _device_module)
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_storage=True
        )


_register()

# torch.compile(backend="tpu") finds torchtpu._dynamo through the torch_dynamo_backends entry
# point, so `import torchtpu` does not pay for importing Dynamo.

from .device import device_count, is_available  # noqa: E402
