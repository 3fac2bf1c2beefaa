"""TpuModelRunner: vLLM's own GPU model runner, with its torch.cuda stream/event calls mapped to
torch.tpu (the same approach as vLLM's XPU runner). Input preparation, the model, the paged
attention backend and the sampler all run on the tpu device."""

from __future__ import annotations

import dataclasses
from functools import partial

import torch
from vllm.config import VllmConfig
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from .buckets import padded_token_count, token_buckets


def map_cuda_streams_and_events_to_tpu() -> None:
    """The GPU runner creates torch.cuda streams and events; on tpu they are torch.tpu's
    (every stream of a device is PJRT's one ordered queue, so they add no concurrency).
    Each callable is its own functools.partial: Dynamo refuses two registrations of one
    function object, which aliasing torch.cuda.x to torch.tpu.x would be."""
    torch.cuda.Stream = torch.tpu.Stream
    torch.cuda.Event = _tpu_event
    torch.cuda.current_stream = partial(torch.tpu.current_stream)
    torch.cuda.default_stream = partial(torch.tpu.default_stream)
    torch.cuda.stream = partial(torch.tpu.stream)
    torch.cuda.set_stream = partial(torch.tpu.set_stream)


def _tpu_event(*args, blocking=None, interprocess=None, **kwargs):
    # torch.cuda.Event's `blocking`/`interprocess` have no meaning for PJRT events.
    return torch.tpu.Event(*args, **kwargs)


def compile_piecewise_around_attention(runner: GPUModelRunner) -> None:
    """torch.compile(backend="tpu") on the model, with a graph break at each attention layer:
    the pieces between attentions depend on the token count only, so warming up every token
    bucket at startup compiles every program the model needs (one XLA program per piece and
    bucket), while attention, whose shapes follow the batch's requests and context lengths,
    runs eagerly on its cached per-op programs. This is vLLM's piecewise design, with XLA
    programs in place of CUDA graphs."""
    from vllm.model_executor.layers.attention import attention as attention_module

    layer_cls = attention_module.Attention
    if not getattr(layer_cls.forward, "_torchtpu_graph_break", False):
        eager_forward = torch._dynamo.disable(layer_cls.forward, recursive=True)
        eager_forward._torchtpu_graph_break = True
        layer_cls.forward = eager_forward
    # Dynamo's automatic dynamic shapes make one trace serve every bucket; the tpu backend
    # still compiles one XLA program per concrete shape.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    # Only forward: the module keeps its type (vLLM inspects it) and compute_logits stays eager.
    model = runner.model
    model.forward = torch.compile(model.forward, backend="tpu")


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        map_cuda_streams_and_events_to_tpu()
        super().__init__(vllm_config, device)

    def tpu_warmup_sizes(self) -> list[int]:
        return token_buckets(self.max_num_tokens)

    @property
    def tpu_compiles(self) -> bool:
        from .platform import TPU_COMPILE_MARKER

        return self.compilation_config.backend == TPU_COMPILE_MARKER

    def load_model(self, *args, **kwargs) -> None:
        super().load_model(*args, **kwargs)
        if self.tpu_compiles:
            compile_piecewise_around_attention(self)

    def _determine_batch_execution_and_padding(self, num_tokens, num_reqs, *args, **kwargs):
        # CUDA runners pad a batch to a captured CUDA-graph size; here every batch is padded
        # to a token bucket, so XLA compiles one program per bucket instead of per size.
        mode, desc, ubatch, across_dp, stats = super()._determine_batch_execution_and_padding(
            num_tokens, num_reqs, *args, **kwargs
        )
        padded = padded_token_count(desc.num_tokens, self.max_num_tokens)
        if padded != desc.num_tokens and across_dp is None:
            desc = dataclasses.replace(desc, num_tokens=padded)
        return mode, desc, ubatch, across_dp, stats

    def _sync_device(self) -> None:
        torch.tpu.synchronize(self.device)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        # The GPU runner copies into pinned memory and waits on a CUDA event; a tpu->host copy
        # already waits for the producing execution.
        return sampled_token_ids.tolist()
