"""TpuModelRunner: vLLM's GPU model runner keeps the request state (the persistent InputBatch on
the host, block tables, the scheduler's updates) and vLLM's bookkeeping; the step itself is
torchtpu's:

- input preparation on the host, in numpy, into ONE int32 buffer of the step's bucket
  (runner_inputs.py), uploaded in one transfer;
- compiled mode: ONE program per (tokens, requests) bucket for the model, every layer's paged
  attention and KV-cache write (into the donated caches), the sampled rows' logits and their
  greedy tokens; one more program per request bucket when a request samples (programs.py,
  sampling.py). Every bucket compiles at startup (TpuWorker.compile_or_warm_up_model);
- eager mode (enforce_eager=True, or tensor parallelism, whose collectives run between
  programs): the same step function op by op;
- requests that need more than the tpu sampler does (logprobs, penalties, structured output...)
  sample with vLLM's own Sampler from the same step's logits.
"""

from __future__ import annotations

from functools import partial

import torch
from vllm.config import VllmConfig
from vllm.forward_context import set_forward_context
from vllm.logger import init_logger
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput, SamplerOutput
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

from .attention import TpuPagedAttentionMetadata
from .buckets import bucket_of, request_buckets, step_buckets, token_buckets
from .moe import call_moe_directly
from .programs import StepPrograms, numpy_upload
from .runner_inputs import StepLayout, prepare_step, split
from .sampling import RequestSeeds, sample

logger = init_logger("vllm.plugins." + __name__)


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


def _host_min_p_processor(proc):
    """vLLM's min-p logits processor keeps its values on the device and copies them there when
    the batch changes (a program per change, and a compile per new batch size); the tpu sampler
    reads min_p from the step buffer instead, so this one keeps them on the host and moves them
    only when vLLM's own Sampler applies it."""
    from vllm.v1.sample.logits_processor.builtin import MinPLogitsProcessor

    class HostMinPLogitsProcessor(MinPLogitsProcessor):
        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            if not self.min_p_count:
                return logits
            host = self.min_p
            self.min_p = host.to(logits.device)
            try:
                return super().apply(logits)
            finally:
                self.min_p = host

    new = HostMinPLogitsProcessor.__new__(HostMinPLogitsProcessor)
    new.__dict__.update(proc.__dict__)
    new.use_double_tensor = False
    new.min_p_device = new.min_p_cpu_tensor
    new.min_p = new.min_p_cpu_tensor[: new.min_p.shape[0]]
    return new


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        map_cuda_streams_and_events_to_tpu()
        super().__init__(vllm_config, device)
        self._check_supported()
        self.tpu_seeds = RequestSeeds()
        # Set when every step samples with vLLM's Sampler (engine-wide custom logits processors).
        self.tpu_fallback_reason: str | None = None
        self.tpu_programs: StepPrograms | None = None
        # Runs the compiled mode's steps op by op (tests compare both on one engine).
        self.tpu_eager_steps = False
        self._tpu_step = None
        self._token_buckets = token_buckets(self.max_num_tokens)
        self._request_buckets = request_buckets(self.max_num_reqs)

    def _check_supported(self) -> None:
        unsupported = {
            "pipeline parallelism": self.parallel_config.pipeline_parallel_size > 1,
            "data parallelism": self.parallel_config.data_parallel_size > 1,
            "speculative decoding": self.speculative_config is not None,
            "LoRA": bool(self.lora_config),
            "pooling models": self.is_pooling_model,
            "multimodal models": self.supports_mm_inputs,
            "M-RoPE": self.uses_mrope,
            "prompt embeddings": self.enable_prompt_embeds,
            "encoder-decoder models": self.model_config.is_encoder_decoder,
        }
        named = [name for name, bad in unsupported.items() if bad]
        if named:
            raise NotImplementedError("vLLM on tpu does not support " + ", ".join(named) + " yet")

    def load_model(self, *args, **kwargs) -> None:
        super().load_model(*args, **kwargs)
        call_moe_directly(self.model)

    # -- configuration ------------------------------------------------------------------------

    @property
    def tpu_compiles(self) -> bool:
        """Whether steps run as compiled programs: not under enforce_eager, and not with tensor
        parallelism (its collectives between processes run between programs)."""
        from .platform import TPU_COMPILE_MARKER

        return (self.compilation_config.backend == TPU_COMPILE_MARKER
                and self.parallel_config.tensor_parallel_size == 1)

    def tpu_buckets(self) -> list[tuple[int, int]]:
        return step_buckets(self.max_num_tokens, self.max_num_reqs)

    def tpu_layout(self, tokens: int, reqs: int) -> StepLayout:
        return StepLayout(bucket_of(tokens, self._token_buckets),
                          bucket_of(reqs, self._request_buckets), self._max_blocks())

    def _max_blocks(self) -> int:
        return self.input_batch.block_table[0].max_num_blocks_per_req

    def tpu_attention_layers(self) -> dict:
        from vllm.model_executor.layers.attention.attention import Attention

        ctx = self.compilation_config.static_forward_context
        return {name: layer for name, layer in ctx.items() if isinstance(layer, Attention)}

    # -- KV cache -----------------------------------------------------------------------------

    def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes,
                                    kv_cache_allocation_context=None) -> dict[str, torch.Tensor]:
        """One tensor per layer, [blocks, block_size, kv_heads, head_size + head_size_v] of the
        cache dtype (vLLM's one int8 allocation with per-layer views would make every program
        read and write the whole buffer through dtype views)."""
        if len(kv_cache_config.kv_cache_groups) != 1:
            raise NotImplementedError(
                "vLLM on tpu supports one KV cache group (models whose layers all use "
                f"attention), got {len(kv_cache_config.kv_cache_groups)}")
        group = kv_cache_config.kv_cache_groups[0]
        spec = group.kv_cache_spec
        num_blocks = kv_cache_config.num_blocks
        kv_caches: dict[str, torch.Tensor] = {}
        for name in group.layer_names:
            if name in self.shared_kv_cache_layers:
                continue
            s = getattr(spec, "kv_cache_specs", {}).get(name, spec)
            kv_caches[name] = torch.zeros(
                num_blocks, s.block_size, s.num_kv_heads, s.head_size + s.head_size_v,
                dtype=s.dtype, device=self.device)
        for name, target in self.shared_kv_cache_layers.items():
            kv_caches[name] = kv_caches[target]
        bind_kv_cache(kv_caches, self.compilation_config.static_forward_context, self.kv_caches,
                      kv_cache_groups=kv_cache_config.kv_cache_groups)
        return kv_caches

    def initialize_kv_cache(self, kv_cache_config, is_profiling: bool = False,
                            kv_cache_allocation_context=None) -> None:
        super().initialize_kv_cache(kv_cache_config, is_profiling=is_profiling,
                                    kv_cache_allocation_context=kv_cache_allocation_context)
        self._adapt_input_batch()

    def _adapt_input_batch(self) -> None:
        """Keeps vLLM's InputBatch from copying sampling state to the device at every batch
        change (a program, and a compile per new batch size): the tpu sampler reads the step
        buffer, and vLLM's own Sampler (the fallback) gets its metadata when it runs."""
        from vllm.v1.sample.logits_processor import BUILTIN_LOGITS_PROCESSORS
        from vllm.v1.sample.logits_processor.builtin import MinPLogitsProcessor

        ib = self.input_batch
        procs = ib.logitsprocs
        procs.argmax_invariant = [
            _host_min_p_processor(p) if type(p) is MinPLogitsProcessor else p
            for p in procs.argmax_invariant]
        builtin = tuple(BUILTIN_LOGITS_PROCESSORS)
        custom = [p for p in procs.all if not isinstance(p, builtin)]
        if custom:
            self.tpu_fallback_reason = "custom logits processors"
        real = ib._make_sampling_metadata

        def stale_metadata():
            ib._tpu_metadata_stale = True
            return ib.sampling_metadata

        ib._tpu_make_sampling_metadata = real
        ib._tpu_metadata_stale = True
        ib._make_sampling_metadata = stale_metadata

    def _sampling_metadata(self):
        ib = self.input_batch
        if getattr(ib, "_tpu_metadata_stale", False):
            ib.sampling_metadata = ib._tpu_make_sampling_metadata()
            ib._tpu_metadata_stale = False
        return ib.sampling_metadata

    # -- the step -----------------------------------------------------------------------------

    def tpu_forward(self, lay: StepLayout, buf: torch.Tensor):
        """The step on its uploaded buffer (traced into one program, or run eagerly): the model,
        every layer's attention and cache write, the logits of each request's last token and its
        greedy token. Returns (greedy tokens [R] int32, logits [R, V], sampling parameter
        words, hidden states [T, hidden])."""
        v = split(buf, lay)
        md = TpuPagedAttentionMetadata(v.slot_mapping, v.block_tables, v.seq_lens,
                                       v.query_start_loc)
        from vllm.config import CUDAGraphMode

        with set_forward_context(md, self.vllm_config, num_tokens=lay.tokens,
                                 cudagraph_runtime_mode=CUDAGraphMode.NONE, slot_mapping={}):
            hidden = self.model(input_ids=v.token_ids, positions=v.positions.to(torch.int64),
                                intermediate_tensors=None, inputs_embeds=None)
        logits = self.model.compute_logits(hidden[v.logits_indices.to(torch.int64)])
        greedy = logits.argmax(dim=-1).to(torch.int32)
        return greedy, logits, v.params.clone(), hidden

    def tpu_warm_up(self) -> dict:
        """Compiled mode: traces and compiles every bucket's programs (in parallel, into the
        disk cache, or loaded from it). Counts what it did."""
        if not self.tpu_compiles:
            return {"programs": 0}
        self.tpu_programs = StepPrograms(self, self._max_blocks())
        stats = self.tpu_programs.build(self.tpu_buckets())
        self.tpu_programs.finish_warmup()
        return stats

    def _programs(self) -> StepPrograms | None:
        return None if self.tpu_eager_steps else self.tpu_programs

    @torch.no_grad()
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        if self._tpu_step is not None:
            raise RuntimeError("State error: sample_tokens() must be called after "
                               "execute_model() returns None.")
        for rid in scheduler_output.finished_req_ids:
            self.tpu_seeds.forget(rid)
        deferred = self._update_states(scheduler_output)
        if not scheduler_output.total_num_scheduled_tokens:
            if deferred:
                deferred()
            return EMPTY_MODEL_RUNNER_OUTPUT
        host = prepare_step(self, scheduler_output, self.tpu_layout)
        buf = numpy_upload(host.buffer, self.device)
        if self._programs() is not None:
            greedy, logits, params, hidden = self.tpu_programs.run_forward(host.layout, buf)
        else:
            greedy, logits, params, hidden = self.tpu_forward(host.layout, buf)
        self._tpu_step = (scheduler_output, host, greedy, logits, params, hidden)
        if deferred:
            deferred()
        return None

    @torch.no_grad()
    def sample_tokens(self, grammar_output):
        if self._tpu_step is None:
            return super().sample_tokens(grammar_output)
        scheduler_output, host, greedy, logits, params, hidden = self._tpu_step
        self._tpu_step = None
        n = host.num_reqs
        fallback = host.fallback or ("structured output" if grammar_output is not None else None)
        if fallback is None:
            if host.all_greedy:
                tokens = greedy
            elif self._programs() is not None:
                tokens = self.tpu_programs.run_sampler(host.layout.reqs, logits, params)
            else:
                tokens = sample(logits, params)
            sampled = tokens.cpu()[:n].view(n, 1)  # the step's one device->host transfer
            sampler_output = SamplerOutput(sampled_token_ids=sampled, logprobs_tensors=None)
        else:
            from vllm.v1.structured_output.utils import apply_grammar_bitmask

            logits = logits[:n]
            metadata = self._sampling_metadata()
            if grammar_output is not None:
                apply_grammar_bitmask(scheduler_output, grammar_output, self.input_batch, logits)
            sampler_output = self.sampler(logits=logits, sampling_metadata=metadata)
        (num_nans, _, logprobs, valid_sampled, prompt_logprobs, req_ids, req_id_to_index,
         _) = self._bookkeeping_sync(scheduler_output, sampler_output, logits, hidden,
                                     scheduler_output.total_num_scheduled_tokens)
        if self._programs() is not None:
            self.tpu_programs.check_step()
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index=req_id_to_index,
            sampled_token_ids=valid_sampled,
            logprobs=logprobs,
            prompt_logprobs_dict=prompt_logprobs,
            num_nans_in_logits=num_nans,
        )

    def _sync_device(self) -> None:
        torch.tpu.synchronize(self.device)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        # The GPU runner copies into pinned memory and waits on a CUDA event; a tpu->host copy
        # already waits for the producing execution.
        return sampled_token_ids.tolist()
