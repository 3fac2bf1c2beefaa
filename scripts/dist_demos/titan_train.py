"""torchrun entry point: TorchTitan's own trainer (torchtitan.train.main) on one of two devices.

TITAN_DEVICE=tpu: torchtpu is imported first, so TorchTitan's device probe
(torch._utils._get_available_device_type) finds the "tpu" device and its c10d backend; each
process sees one tpu device (TORCHTPU_CPU_DEVICE_COUNT=1 on the CPU plugin), TorchTitan maps
LOCAL_RANK to it and initialises "tpu:tpu_dist,cpu:gloo".

TITAN_DEVICE=cpu: the reference. TorchTitan has no CPU mode (it falls back to "cuda" when no
accelerator is found), so its device globals are pointed at "cpu" and a device module made of
torch.cpu plus the few memory-report functions TorchTitan's metrics call (constant answers),
before the trainer modules import them; the process group is then gloo. Gloo has no
ReduceOp.PREMUL_SUM, which FSDP2 uses for TorchTitan's gradient divide factor 1.0 (the tpu
backend supports it): the CPU run also sets FSDP's force_sum_reduction_for_comms, the same
reduction (a sum, factor 1) expressed as SUM.

Attention: the llama3 debug config's FlexAttention runs through an Inductor-compiled
flex_attention kernel, which supports CUDA (and CPU without backward) only. The config
`llama3_debugmodel_sdpa` registered here is TorchTitan's `llama3_debugmodel` with every layer's
inner attention set to TorchTitan's own maskless ScaledDotProductAttention (causal SDPA, the
backend its graph-trainer tests use). Both runs, tpu and CPU, use it.

TorchTitan 0.3.0 targets a newer torch than 2.13 in one place: after the first step it calls
torch.distributed.set_timeout(timeout, group), which torch 2.13 lacks; where it is missing it is
provided here through ProcessGroup.set_timeout (which sets the timeout on each of the group's
backends, the tpu backend included).

Everything else (model, FSDP2 sharding, optimizer, data loader, loss) is TorchTitan's code.
"""

import os

import torch

device = os.environ.get("TITAN_DEVICE", "tpu")
if device == "tpu":
    import torchtpu  # noqa: F401  (registers the device and the "tpu"/"tpu_dist" backends)
elif device == "cpu":
    import types

    import torchtitan.tools.utils as titan_utils

    cpu_module = types.SimpleNamespace(
        set_device=torch.cpu.set_device,
        device_count=torch.cpu.device_count,
        synchronize=torch.cpu.synchronize,
        current_device=lambda: 0,  # an index: TorchTitan passes it to barrier(device_ids=...)
        get_device_name=lambda *_: "cpu",
        get_device_properties=lambda *_: types.SimpleNamespace(name="cpu", total_memory=1 << 34),
        memory_stats=lambda *_: {},
        reset_peak_memory_stats=lambda *_: None,
        empty_cache=lambda: None,
    )
    titan_utils.device_type, titan_utils.device_module = "cpu", cpu_module

    import torchtitan.distributed.fsdp as titan_fsdp
    from torch.distributed.fsdp import FSDPModule

    _disable_division = titan_fsdp.disable_fsdp_gradient_division

    def _disable_division_with_sum(model):
        _disable_division(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)

    titan_fsdp.disable_fsdp_gradient_division = _disable_division_with_sum
else:
    raise SystemExit(f"TITAN_DEVICE must be 'tpu' or 'cpu', not {device!r}")

import torch.distributed as dist  # noqa: E402

if not hasattr(dist, "set_timeout"):

    def _set_timeout(timeout, group=None):
        (group if group is not None else dist.distributed_c10d._get_default_group()).set_timeout(
            timeout)

    dist.set_timeout = _set_timeout

_init_process_group = dist.init_process_group


def _logged_init_process_group(*args, **kwargs):
    # The demo script checks this line: the tpu run must be on the "tpu" backend.
    backend = kwargs.get("backend", args[0] if args else None)
    print(f"titan_train: init_process_group(backend={backend!r}) on {device}", flush=True)
    return _init_process_group(*args, **kwargs)


dist.init_process_group = _logged_init_process_group

import torchtitan.models.llama3.config_registry as llama3_configs  # noqa: E402
from torchtitan.models.common.attention import ScaledDotProductAttention  # noqa: E402
from torchtitan.train import main  # noqa: E402


def llama3_debugmodel_sdpa():
    config = llama3_configs.llama3_debugmodel()
    for layer in config.model_spec.model.layers:
        if layer.attention is not None:
            layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return config


llama3_configs.llama3_debugmodel_sdpa = llama3_debugmodel_sdpa

if __name__ == "__main__":
    main()
