"""torchtpu: an XLA device (TPU, XLA:GPU, XLA:CPU through PJRT) as a native PyTorch device.

    import torch, torchtpu
    x = torch.randn(4, 4, device="tpu")
"""

from __future__ import annotations


def _autoload() -> None:
    """The entry point of installs made before torchtpu_autoload existed (their metadata still
    names torchtpu:_autoload until reinstalled); importing this module was the whole job."""


import torch  # noqa: E402

__version__ = "0.1.0"


def _check_torch_version() -> str:
    """_C links the C++ libraries of the torch it was compiled against, whose ABI changes between
    minor releases: under another torch it would fail with an undefined symbol, or load and
    misbehave. One clear error instead, naming both versions."""
    try:
        from ._build_info import TORCH_VERSION as built
    except ImportError:  # a checkout that has not been built yet: _C's own import error follows
        return ""

    def minor(v: str) -> tuple[str, ...]:
        return tuple(v.split("+")[0].split(".")[:2])

    if minor(built) != minor(torch.__version__):
        raise ImportError(
            f"torchtpu {__version__} was built against torch {built}, but torch "
            f"{torch.__version__} is installed: its C++ extension cannot load under another torch "
            f"minor version. Install torch=={'.'.join(minor(built))}.* (pip install "
            f"'torch=={'.'.join(minor(built))}.*'), or rebuild torchtpu against this torch."
        )
    return built


# The torch version this torchtpu was compiled against (its C++ ABI: same major.minor needed).
__torch_version__ = _check_torch_version()

from . import _C  # noqa: E402
from ._plugin import find_plugin
from .metrics import (finish_background_compiles, metrics, metrics_report, recompile_reasons,
                      reset_metrics)

__all__ = ["metrics", "metrics_report", "recompile_reasons", "reset_metrics",
           "finish_background_compiles", "is_available", "device_count",
           "stablehlo_op", "jax_op", "set_eager_mode", "get_eager_mode", "fused_eager", "mark_step"]


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
    # torch.distributed's "tpu" (and "tpu_dist") backend; see torchtpu/distributed.
    from . import distributed as _distributed

    _distributed.register()


_register()

from . import _printing  # noqa: E402

_printing.install()

# backend="tpu" is in Dynamo's registry once torchtpu has loaded (a first torch.compile from
# several threads at once must not race on the registry's entry-point lookup); the backend itself
# is built at its first graph. torch.compile(model) without a backend reaches the same backend for
# graphs on tpu tensors (see _inductor_route).
from . import _compile_backend  # noqa: E402

_compile_backend.install()

from . import _inductor_route  # noqa: E402

_inductor_route.install()

# Multi-process Accelerate / Trainer on tpu (Accelerate has no entry for our c10d backend).
from . import _accelerate  # noqa: E402

_accelerate.install()

# safetensors loads onto tpu (its Rust core knows a fixed list of device names).
from . import _safetensors  # noqa: E402

_safetensors.install()

from .device import device_count, is_available  # noqa: E402
from .kernels import jax_op, stablehlo_op  # noqa: E402
from ._warmup import save_signatures, warmup  # noqa: E402
from ._fused import fused_eager, get_eager_mode, mark_step, set_eager_mode  # noqa: E402


class _Pallas:
    """torch.tpu.pallas: TorchTPU's name for JAX/Pallas kernels as tpu ops (torchtpu.jax_op)."""

    jax_op = staticmethod(jax_op)


if not hasattr(torch.tpu, "pallas"):
    torch.tpu.pallas = _Pallas()


# Keeps the tensors of the exit-time backward below alive past it, so a worker thread never drops
# their last reference.
_quiesce_keepalive: list = []


def _quiesce_autograd_device_threads() -> None:
    """At exit, before the interpreter finalizes: let the autograd engine's tpu worker threads
    finish with the last backward. PyTorch's backward stashes a Python object (the contextvars
    context) in the graph task's thread-local state; a worker thread that drops the graph task's
    last reference after finalization has begun must take the GIL, and CPython then ends that
    thread with pthread_exit, which aborts the process ("terminate called without an active
    exception"). A worker processes its queue in order and drops each graph task before taking
    the next one, so one tiny backward per device, sent straight to the engine (so no Python
    object rides along), returns only after the earlier graph tasks are gone. Only runs when the
    engine's tpu workers exist, so it never starts threads at exit."""
    try:
        # is_initialized, not is_available: without a runtime there are no tpu workers, and
        # asking could start a device-counting child process at exit.
        if not _C._other_threads_selected_a_device() or not _C._is_initialized():
            return
        engine = torch.autograd.Variable._execution_engine
        for index in _C._local_devices():   # the process's own (one per local rank: its own)
            x = torch.zeros((), device=f"tpu:{index}", requires_grad=True)
            y = x * 2
            seed = torch.ones((), device=f"tpu:{index}")
            _quiesce_keepalive.extend((x, y, seed))
            engine.run_backward((y,), (seed,), False, False, (), True, True)
    except Exception:  # at exit, never turn a clean shutdown into an error
        pass


def _finish_async_work() -> None:
    """At exit, after every other torchtpu exit hook (atexit runs hooks last-registered first,
    and the autograd quiesce below launches ops): wait for the compiles and launches still in
    flight, before exit() destroys the PJRT plugin's static objects under them (a process that
    exited with a compile still running died of SIGABRT/SIGSEGV, issue 32)."""
    try:
        _C._finish_async_work_for_exit()
    except Exception:  # at exit, never turn a clean shutdown into an error
        pass


import atexit  # noqa: E402

atexit.register(_finish_async_work)
atexit.register(_quiesce_autograd_device_threads)


def compile_step(fn, *owners):
    """One XLA program per training step; see torchtpu._compile_step."""
    from ._compile_step import compile_step as _compile_step

    return _compile_step(fn, *owners)
