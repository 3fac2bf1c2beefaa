"""TpuPlatform: tells vLLM how to use torchtpu's `tpu` device (PyTorch's PrivateUse1 key)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
import torchtpu  # noqa: F401  (registers the tpu device and torch.tpu)
from vllm.logger import init_logger
from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

# Under "vllm." so vLLM's logging configuration (level, format) applies.
logger = init_logger("vllm.plugins." + __name__)

# compilation_config.backend when TpuModelRunner compiles the model (torch.compile, tpu backend).
TPU_COMPILE_MARKER = "tpu"

# KV-cache budget when neither --kv-cache-memory-bytes nor torch.tpu memory figures give one.
DEFAULT_KV_CACHE_BYTES = 256 << 20


def kv_cache_budget_bytes(memory: tuple[int, int] | None, utilization: float) -> int:
    """TORCHTPU_VLLM_KV_CACHE_BYTES wins; else what stays free on the device when it is kept to
    `utilization` of its memory (free - (1 - utilization) * total, vLLM's gpu_memory_utilization
    rule) when the device reports (free, total); else DEFAULT_KV_CACHE_BYTES."""
    env = os.environ.get("TORCHTPU_VLLM_KV_CACHE_BYTES")
    if env:
        try:
            value = int(env)
        except ValueError:
            raise ValueError(
                f"TORCHTPU_VLLM_KV_CACHE_BYTES must be an integer number of bytes, got {env!r}"
            ) from None
        if value <= 0:
            raise ValueError(f"TORCHTPU_VLLM_KV_CACHE_BYTES must be positive, got {value}")
        return value
    if memory is not None:
        free, total = memory
        budget = int(free - (1.0 - utilization) * total)
        if budget <= 0:
            raise ValueError(
                f"no tpu memory left for the KV cache: {free} bytes free of {total}, and "
                f"gpu_memory_utilization {utilization} keeps {1.0 - utilization:.2f} of it "
                "unused; raise it or set --kv-cache-memory-bytes"
            )
        return budget
    return DEFAULT_KV_CACHE_BYTES


def device_memory_info(index: int) -> tuple[int, int] | None:
    """(free, total) bytes from torch.tpu.mem_get_info, or None where it says nothing about a
    separate device memory: on the XLA CPU plugin "device memory" is the host's RAM, shared with
    everything else, so a configured budget (or DEFAULT_KV_CACHE_BYTES) sizes the cache.

    Also None in a process that has not opened the device (vLLM's front-end process asks while it
    builds the engine config): opening it there would hold a TPU host's chips, which the engine's
    workers need."""
    if not torch.tpu.is_initialized():
        return None
    if torchtpu._C._platform() == "cpu":
        return None
    fn = getattr(torch.tpu, "mem_get_info", None)
    if fn is None:  # an older torchtpu
        return None
    try:
        free, total = fn(index)
    except (NotImplementedError, RuntimeError):
        return None
    return int(free), int(total)


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    ray_device_key: str = ""
    # torchtpu's c10d backend (torchtpu.distributed): collectives on tpu tensors for vLLM's device
    # groups; it serves CPU tensors too, as gloo does, for the groups vLLM keeps on the host.
    dist_backend: str = "tpu"
    simple_compile_backend: str = "tpu"
    device_control_env_var: str = "TORCHTPU_VISIBLE_DEVICES"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float32, torch.float16]

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.bfloat16, torch.float32, torch.float16):
            raise ValueError(f"dtype {dtype} is not supported on tpu (use bfloat16 or float32)")

    @classmethod
    def import_kernels(cls) -> None:
        # vLLM's C kernels are CUDA/CPU kernels: nothing in them runs on tpu.
        return

    @classmethod
    def get_attn_backend_cls(
        cls,
        selected_backend: AttentionBackendEnum,
        attn_selector_config: AttentionSelectorConfig,
        num_heads: int | None = None,
    ) -> str:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("MLA and sparse attention are not supported on tpu yet")
        if selected_backend not in (None, AttentionBackendEnum.CUSTOM):
            logger.info("Attention backend %s is not available on tpu; using TPU_PAGED.",
                        selected_backend)
        return AttentionBackendEnum.CUSTOM.get_path()

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability | None:
        return None

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        # The front-end process asks too (engine-config defaults); it must not open the device
        # (see device_memory_info), so it answers with the device type only.
        if not torch.tpu.is_initialized():
            return "tpu"
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        info = device_memory_info(device_id)
        return info[1] if info is not None else DEFAULT_KV_CACHE_BYTES

    @classmethod
    def device_count(cls) -> int:
        return torch.tpu.device_count()

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        # Host->tpu copies go through PJRT's own staging; pinned host buffers buy nothing.
        return False

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def opaque_attention_op(cls) -> bool:
        # Attention layers call the backend in Python (no opaque custom op), so the runner's
        # traced step holds every layer's attention op in its one program.
        return False

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def supports_structured_output(cls) -> bool:
        return True

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        parallel_config = vllm_config.parallel_config
        if parallel_config.worker_cls == "auto":
            parallel_config.worker_cls = "torchtpu_vllm.worker.TpuWorker"
        if parallel_config.enable_dbo:
            parallel_config.enable_dbo = False

        cache_config = vllm_config.cache_config
        if not cache_config.user_specified_block_size:
            cache_config.block_size = 16

        compilation_config = vllm_config.compilation_config
        # No CUDA graphs: compiled XLA programs play that role.
        compilation_config.cudagraph_mode = CUDAGraphMode.NONE
        compilation_config.cudagraph_capture_sizes = []
        model_config = vllm_config.model_config
        # This runs again in the engine process on the config it already changed: the marker
        # then still says "compile".
        eager = (model_config is not None and model_config.enforce_eager) or (
            compilation_config.mode == CompilationMode.NONE
            and compilation_config.backend != TPU_COMPILE_MARKER
        )
        # vLLM's own compile modes assume Inductor (VLLM_COMPILE) or one fullgraph
        # (STOCK_TORCH_COMPILE); TpuModelRunner traces the whole step itself into one program
        # per bucket at startup. The backend field carries that decision to the worker process.
        compilation_config.mode = CompilationMode.NONE
        compilation_config.backend = "eager" if eager else TPU_COMPILE_MARKER
        vllm_config.scheduler_config.async_scheduling = False

        # vLLM spawns its engine core; a forked child cannot reuse the parent's PJRT client.
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")

    @classmethod
    def get_supported_vit_attn_backends(cls):
        return []
