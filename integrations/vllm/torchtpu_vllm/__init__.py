"""vLLM platform plugin for torchtpu: vLLM's engine, scheduler, KV-cache manager and OpenAI
server run models on the `tpu` device (a TPU, XLA:GPU or XLA:CPU through PJRT).

vLLM finds `register` through the `vllm.platform_plugins` entry point. `VLLM_TARGET_DEVICE=cpu`
still selects vLLM's own CPU platform (used as the baseline in benchmarks/vllm_serving.py).
"""

from __future__ import annotations

import os

__all__ = ["register"]


def register() -> str | None:
    """Returns the platform class when torchtpu has a usable device, else None (so a machine
    without the PJRT plugin falls back to vLLM's own platform detection)."""
    if os.environ.get("TORCHTPU_VLLM", "1") == "0":
        return None
    try:
        import torch
        import torchtpu  # noqa: F401

        if not torch.tpu.is_available():
            return None
    except Exception:  # a broken install must not break vLLM's platform detection
        return None
    _register_attention_backend()
    return "torchtpu_vllm.platform.TpuPlatform"


def _register_attention_backend() -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(
        AttentionBackendEnum.CUSTOM, "torchtpu_vllm.attention.TpuPagedAttentionBackend"
    )
