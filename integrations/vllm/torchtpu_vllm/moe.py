"""Mixture-of-experts layers on tpu.

vLLM's unquantized fused-MoE method leaves an out-of-tree platform to supply the experts' kernel
(its "OOT" backend builds none), and its MoE runner calls the experts through an opaque custom
op (vllm::moe_forward) on every platform it does not know. Here the method is replaced (vLLM's
CustomOp out-of-tree registry) by plain torch ops that torchtpu lowers, and each MoE runner calls
its Python implementation directly, so a traced step holds the experts inside its one program.

The experts run densely: every token through every expert, weighted by its (zero for
unselected experts) routing weight. That is exact and lowers everywhere; a TPU would group the
tokens per expert instead (ragged dot), which is future work.
"""

from __future__ import annotations

import torch

_registered = False


def _gated(activation, h: torch.Tensor, layer) -> torch.Tensor:
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    if activation == MoEActivation.SWIGLUOAI:  # gpt-oss: gate/up interleaved, clamped
        cfg = getattr(layer, "moe_config", None)
        alpha = (getattr(layer, "swiglu_alpha", None) or getattr(cfg, "swiglu_alpha", None)
                 or 1.702)
        limit = (getattr(layer, "swiglu_limit", None) or getattr(cfg, "swiglu_limit", None)
                 or 7.0)
        gate, up = h[..., ::2], h[..., 1::2]
        gate = gate.clamp(max=limit)
        up = up.clamp(min=-limit, max=limit)
        return (up + 1) * (gate * torch.sigmoid(gate * alpha))
    d = h.shape[-1] // 2
    gate, up = h[..., :d], h[..., d:]
    if activation == MoEActivation.SILU:
        return torch.nn.functional.silu(gate) * up
    if activation == MoEActivation.GELU:
        return torch.nn.functional.gelu(gate) * up
    if activation == MoEActivation.GELU_TANH:
        return torch.nn.functional.gelu(gate, approximate="tanh") * up
    raise NotImplementedError(f"MoE activation {activation} is not supported on tpu")


SUPPORTED_ACTIVATIONS = ("SILU", "GELU", "GELU_TANH", "SWIGLUOAI")


def dense_experts(layer, x: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor) -> torch.Tensor:
    """sum over the selected experts e of weight(t, e) * expert_e(x_t), for tokens x [T, H];
    w13 [E, 2I, H] (gate and up), w2 [E, H, I]."""
    w13, w2 = layer.w13_weight, layer.w2_weight
    experts = w13.shape[0]
    weights = torch.zeros(x.shape[0], experts, dtype=torch.float32, device=x.device)
    weights = weights.scatter_add(1, topk_ids.to(torch.int64), topk_weights.to(torch.float32))
    h = torch.einsum("th,eih->tei", x, w13)
    bias13 = getattr(layer, "w13_bias", None)
    if bias13 is not None:
        h = h + bias13
    a = _gated(layer.activation, h, layer)
    y = torch.einsum("tei,ehi->teh", a, w2)
    bias2 = getattr(layer, "w2_bias", None)
    if bias2 is not None:
        y = y + bias2
    return (y.to(torch.float32) * weights[:, :, None]).sum(dim=1).to(x.dtype)


def _topk(scores: torch.Tensor, topk_weights: torch.Tensor, topk_indices: torch.Tensor,
          renormalize: bool):
    weights, ids = scores.topk(topk_weights.shape[-1], dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(topk_weights.dtype), ids.to(topk_indices.dtype)


def topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output,
                 renormalize=False):
    """vLLM's fused top-k softmax routing (a CUDA kernel there), in torch ops."""
    return _topk(torch.softmax(gating_output.to(torch.float32), dim=-1), topk_weights,
                 topk_indices, renormalize)


def topk_sigmoid(topk_weights, topk_indices, token_expert_indices, gating_output,
                 renormalize=False):
    return _topk(torch.sigmoid(gating_output.to(torch.float32)), topk_weights, topk_indices,
                 renormalize)


def register_tpu_moe() -> None:
    """Installs the tpu experts in place of vLLM's unquantized fused-MoE method, and torch
    routing in place of its CUDA top-k kernels (before the model is built)."""
    global _registered
    if _registered:
        return
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot
    from vllm.model_executor.layers.fused_moe.router import fused_topk_router
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
        UnquantizedFusedMoEMethod,
    )

    _registered = True
    fused_topk_router.vllm_topk_softmax = topk_softmax
    fused_topk_router.vllm_topk_sigmoid = topk_sigmoid
    if "UnquantizedFusedMoEMethod" in op_registry_oot:
        return

    @CustomOp.register_oot(name="UnquantizedFusedMoEMethod")
    class TpuUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
        @property
        def is_monolithic(self) -> bool:
            return False

        def process_weights_after_loading(self, layer) -> None:
            super().process_weights_after_loading(layer)
            unsupported = {
                f"activation {layer.activation}":
                    layer.activation.name not in SUPPORTED_ACTIVATIONS,
                "expert parallelism": getattr(layer, "expert_map", None) is not None,
                "router weights applied on the input": bool(
                    getattr(layer, "apply_router_weight_on_input", False)),
            }
            named = [k for k, bad in unsupported.items() if bad]
            if named:
                raise NotImplementedError("MoE on tpu does not support " + ", ".join(named))

        def forward_native(self, layer, x, topk_weights, topk_ids, shared_experts=None,
                           shared_experts_input=None):
            # Shared experts run in the MoE runner (no kernel here overlaps them).
            return dense_experts(layer, x, topk_weights, topk_ids)

        def forward_oot(self, *args, **kwargs):
            return self.forward_native(*args, **kwargs)


def call_moe_directly(model: torch.nn.Module) -> None:
    """Each MoE runner calls its implementation as a Python function instead of through the
    opaque vllm::moe_forward custom op, so tracing the step reaches the experts' torch ops."""
    try:
        from vllm.model_executor.layers.fused_moe.runner import moe_runner
    except ImportError:
        return
    for m in model.modules():
        if isinstance(m, moe_runner.MoERunner):
            shared = getattr(m, "_shared_experts", None) is not None
            m._forward_entry = (moe_runner._moe_forward_shared if shared
                                else moe_runner._moe_forward)
