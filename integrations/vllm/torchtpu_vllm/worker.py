"""TpuWorker: vLLM's GPU worker on a tpu device (one device per local rank)."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext

import torch
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from .model_runner import TpuModelRunner
from .moe import register_tpu_moe
from .platform import device_memory_info, kv_cache_budget_bytes

# Under "vllm." so vLLM's logging configuration (level, format) applies.
logger = init_logger("vllm.plugins." + __name__)


class TpuWorker(Worker):
    def init_device(self) -> None:
        count = torch.tpu.device_count()
        if self.local_rank >= count:
            raise RuntimeError(
                f"local rank {self.local_rank} needs tpu:{self.local_rank}, but only "
                f"{count} tpu devices exist"
            )
        self.device = torch.device(f"tpu:{self.local_rank}")
        torch.tpu.set_device(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(
            self.vllm_config,
            self.rank,
            self.distributed_init_method,
            self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        register_tpu_moe()
        self._init_workspace_and_model_runner()

    def _make_model_runner(self) -> TpuModelRunner:
        if self.use_v2_model_runner:
            logger.warning_once("vLLM's V2 model runner is not supported on tpu; using V1")
        return TpuModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager:
        # vLLM's CuMem pools (sleep mode) are CUDA allocations.
        return nullcontext()

    @torch.no_grad()
    def determine_available_memory(self) -> int:
        """KV-cache bytes: --kv-cache-memory-bytes, else TORCHTPU_VLLM_KV_CACHE_BYTES, else the
        device memory left free (torch.tpu.mem_get_info, after the weights are loaded) within
        gpu_memory_utilization. The dummy forward that CUDA workers profile with is skipped:
        XLA programs allocate their temporaries in the device's own allocator, within the
        memory the utilization leaves."""
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit:
            return int(explicit)
        memory = device_memory_info(self.device.index or 0)
        budget = kv_cache_budget_bytes(memory, self.cache_config.gpu_memory_utilization)
        logger.info("KV cache budget on %s: %.1f MiB", self.device, budget / (1 << 20))
        return budget

    def compile_or_warm_up_model(self) -> CompilationTimes:
        """Compiled mode: every (tokens, requests) bucket's step program and every request
        bucket's sampler program, traced and compiled now, in parallel, into torchtpu's disk
        cache (a warm start loads them). After this, a compile during traffic is a warning
        (TORCHTPU_VLLM_STRICT_COMPILES=1: an error)."""
        start = time.perf_counter()
        stats = self.model_runner.tpu_warm_up()
        set_random_seed(self.model_config.seed)
        self.tpu_warmup_stats = dict(stats, seconds=round(time.perf_counter() - start, 2))
        logger.info("tpu warm-up: %s", self.tpu_warmup_stats)
        return CompilationTimes(
            language_model=self.compilation_config.compilation_time,
            encoder=self.compilation_config.encoder_compilation_time,
        )

    def torchtpu_warmup_stats(self) -> dict:
        """What compile_or_warm_up_model did, for `LLM.collective_rpc("torchtpu_warmup_stats")`:
        programs, trace and compile seconds, programs compiled and loaded from disk."""
        return dict(getattr(self, "tpu_warmup_stats", {}))

    def torchtpu_set_eager_steps(self, eager: bool) -> None:
        """Runs the steps op by op (True) or as the compiled programs (False, the default in
        compiled mode), for `LLM.collective_rpc("torchtpu_set_eager_steps", args=(True,))`."""
        self.model_runner.tpu_eager_steps = bool(eager)

    def torchtpu_metrics(self) -> dict:
        """torchtpu's counters in this worker process (compiles, executions, CPU fallbacks),
        for `LLM.collective_rpc("torchtpu_metrics")`."""
        import torchtpu

        return torchtpu.metrics()

    def sleep(self, level: int = 1) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored")

    def wake_up(self, tags: list[str] | None = None) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored")
