"""Multi-process Hugging Face Accelerate (and so the Trainer) on tpu.

Accelerate 1.16 finds the tpu device through `torch.accelerator` and runs one process on it
unchanged. Launched by torchrun, though, it looks the device type up in its table of
distributed backends (`accelerate.utils.constants.TORCH_DISTRIBUTED_BACKENDS`: cuda, xpu, npu,
hpu, ...), finds no "tpu" there, and quietly sets `DistributedType.NO`: every process trains
alone on its own data shard, with no error and no gradient averaging. That is silently wrong,
so torchtpu fills the gap.

What it changes, only when `accelerate.state` is imported and only for tpu: under a launcher
(`LOCAL_RANK` set) with tpu as the accelerator and no `cpu=True`, `PartialState` initialises
torch.distributed with torchtpu's c10d backend (`"tpu"`) and reports the generic multi-device
type `MULTI_GPU` -- the type under which Accelerate wraps the model in
`DistributedDataParallel`, shards dataloaders, and gathers and reduces across processes
without calling any CUDA API -- and the process's device is `torchtpu.distributed.
local_device()` (`tpu:<LOCAL_RANK>` when the process sees several tpu devices, else `tpu:0`).
When each process sees one device (a host giving each process its own chip), `prepare_model`
builds `DistributedDataParallel` without `device_ids`, as for a CPU module: Accelerate passes
`device_ids=[LOCAL_RANK]`, which names a device that process does not have (Accelerate does the
same for hpu). Nothing else of Accelerate is touched.

The upstream change that makes this unnecessary: a `"tpu": "tpu"` entry in
`TORCH_DISTRIBUTED_BACKENDS` plus a `MULTI_TPU` member in `DistributedType` that joins the
generic multi-device lists (as `MULTI_HPU` and `MULTI_NEURON` did). Transformers already maps
"tpu" to the "tpu_dist" backend in `transformers.distributed.utils`.

TORCHTPU_PATCH_ACCELERATE=0 leaves Accelerate untouched.
"""

from __future__ import annotations

import os

import torch

from . import _config, _post_import

_BACKENDS = ("tpu", "tpu_dist")


def enabled() -> bool:
    return _config.flag("TORCHTPU_PATCH_ACCELERATE", True)


def _tpu_is_the_accelerator() -> bool:
    accelerator = torch.accelerator.current_accelerator()
    return accelerator is not None and accelerator.type == "tpu"


def _patch(state_module) -> None:
    partial_state = state_module.PartialState
    if getattr(partial_state, "_torchtpu_patched", False):
        return
    distributed_type = state_module.DistributedType
    original_prepare_backend = partial_state._prepare_backend
    original_set_device = partial_state.set_device

    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        # Accelerator.__init__ gets here before prepare_model: patch accelerate.accelerator now
        # if it was still executing when torchtpu was imported (`import accelerate` first).
        _post_import.flush()
        launched = int(os.environ.get("LOCAL_RANK", -1)) != -1
        if (launched and not cpu and not sagemaker_dp and backend in (None, *_BACKENDS)
                and _tpu_is_the_accelerator()):
            import torchtpu.distributed  # noqa: F401  (registers the c10d backend)

            return backend or "tpu", distributed_type.MULTI_GPU
        return original_prepare_backend(self, cpu, sagemaker_dp, backend)

    def set_device(self):
        if self.device is None and self.backend in _BACKENDS:
            import torchtpu.distributed

            self.device = torchtpu.distributed.local_device()
            torch.tpu.set_device(self.device)
            return
        original_set_device(self)

    partial_state._prepare_backend = _prepare_backend
    partial_state.set_device = set_device
    partial_state._torchtpu_patched = True


def _patch_accelerator(accelerator_module) -> None:
    accelerator_class = accelerator_module.Accelerator
    if getattr(accelerator_class, "_torchtpu_patched", False):
        return
    original_prepare_model = accelerator_class.prepare_model

    def prepare_model(self, model, device_placement=None, evaluation_mode=False):
        device = self.state.device
        one_device_per_process = (self.state.backend in _BACKENDS and device is not None
                                  and device.index != self.local_process_index)
        if not one_device_per_process:
            return original_prepare_model(self, model, device_placement, evaluation_mode)
        # Accelerate's switch for "build DDP without device_ids"; set only for this call.
        key = "ACCELERATE_BYPASS_DEVICE_MAP"
        saved = os.environ.get(key)
        os.environ[key] = "true"
        try:
            return original_prepare_model(self, model, device_placement, evaluation_mode)
        finally:
            if saved is None:
                del os.environ[key]
            else:
                os.environ[key] = saved

    accelerator_class.prepare_model = prepare_model
    accelerator_class._torchtpu_patched = True


def _patch_launcher(launch_module) -> None:
    # `accelerate launch --num_processes N` without `--multi_gpu` counts devices only for device
    # types in its backend table, found none for tpu and started ONE process, silently. With tpu
    # as the accelerator it now counts tpu devices and, with several, starts N ranks (torchrun),
    # as it does for cuda.
    if getattr(launch_module, "_torchtpu_patched", False):
        return
    # Only the launcher module's name is rebound: Accelerate's own table stays as it is.
    original_backend = launch_module.get_distributed_backend

    def get_distributed_backend(device_type):
        if device_type == "tpu":
            return "tpu"
        return original_backend(device_type)

    launch_module.get_distributed_backend = get_distributed_backend
    launch_module._torchtpu_patched = True


def install() -> None:
    if not enabled():
        return
    _post_import.after_import("accelerate.state", _patch)
    _post_import.after_import("accelerate.accelerator", _patch_accelerator)
    _post_import.after_import("accelerate.commands.launch", _patch_launcher)
