"""Fixtures shared by the vLLM plugin tests (run in .venv-vllm by scripts/test_vllm.sh)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TORCHTPU_VLLM_KV_CACHE_BYTES", str(4 << 20))


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    from torchtpu_vllm.tiny_model import make_tiny_llama

    # head_dim 16 (vLLM's CPU attention rejects it; ours takes any) and GQA: 4 query heads
    # over 2 kv heads.
    return make_tiny_llama(str(tmp_path_factory.mktemp("tiny_llama")), head_dim=16)


@pytest.fixture(scope="session")
def cpu_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
