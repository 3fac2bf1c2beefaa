"""`from_pretrained(..., device_map="auto")` and Accelerate's `dispatch_model` on tpu: a model split
over two or four tpu devices, and a model partly offloaded to the CPU, compute what the whole
model computes on the CPU.

A tiny random Llama is saved to a temporary folder first (no hub). Accelerate places whole
decoder layers on `tpu:0` .. `tpu:3` (the tests run the XLA CPU plugin with four devices,
TORCHTPU_CPU_DEVICE_COUNT=4 in conftest.py) or the CPU within the given `max_memory`, and its
hooks move the activations from one device to the next; CPU offloaded layers keep their weights
on the CPU and are copied to the execution device for each forward. Logits agree within 1e-5
(float32; only the order XLA accumulates in differs).
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

# One decoder layer of this config holds ~37k float32 parameters (~148 KB); the embedding and
# the LM head ~64 KB each: about 720 KB in all.
LAYER_BYTES = 150_000


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, intermediate_size=128,
                      max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits
    return path, ids, logits


def load(path, max_memory):
    return LlamaForCausalLM.from_pretrained(path, device_map="auto", max_memory=max_memory).eval()


def parameter_devices(model):
    return {str(p.device) for p in model.parameters()}


def test_device_map_auto_splits_over_two_tpu_devices(saved_model):
    path, ids, logits_cpu = saved_model
    model = load(path, {0: 4 * LAYER_BYTES, 1: 4 * LAYER_BYTES})
    assert set(model.hf_device_map.values()) == {0, 1}, model.hf_device_map
    assert parameter_devices(model) == {"tpu:0", "tpu:1"}
    with torch.no_grad():
        logits = model(ids.to("tpu:0")).logits
    assert logits.device.type == "tpu"
    torch.testing.assert_close(logits.cpu(), logits_cpu, rtol=1e-5, atol=1e-5)


def test_device_map_auto_with_cpu_offload(saved_model):
    path, ids, logits_cpu = saved_model
    model = load(path, {0: 2 * LAYER_BYTES, "cpu": 100 * LAYER_BYTES})
    assert set(model.hf_device_map.values()) == {0, "cpu"}, model.hf_device_map
    with torch.no_grad():
        logits = model(ids.to("tpu:0")).logits
    # Offloaded layers run on the execution device; their weights wait on the CPU in between.
    assert logits.device == torch.device("tpu:0")
    torch.testing.assert_close(logits.cpu(), logits_cpu, rtol=1e-5, atol=1e-5)


def test_device_map_auto_splits_over_four_tpu_devices_and_generates(saved_model):
    path, ids, logits_cpu = saved_model
    model = load(path, {i: 2 * LAYER_BYTES for i in range(4)})
    assert set(model.hf_device_map.values()) == {0, 1, 2, 3}, model.hf_device_map
    assert parameter_devices(model) == {f"tpu:{i}" for i in range(4)}
    with torch.no_grad():
        logits = model(ids.to("tpu:0")).logits
    torch.testing.assert_close(logits.cpu(), logits_cpu, rtol=1e-5, atol=1e-5)

    # Greedy generation: each layer's dynamic cache lives on that layer's device.
    model_cpu = LlamaForCausalLM.from_pretrained(path).eval()
    kwargs = dict(max_new_tokens=3, do_sample=False, pad_token_id=0)
    tokens = model.generate(ids.to("tpu:0"), **kwargs)
    torch.testing.assert_close(tokens.cpu(), model_cpu.generate(ids, **kwargs), rtol=0, atol=0)


def test_dispatch_model_over_three_tpu_devices_with_cpu_offload(saved_model):
    from accelerate import dispatch_model, infer_auto_device_map

    path, ids, logits_cpu = saved_model
    model = LlamaForCausalLM.from_pretrained(path).eval()
    max_memory = {0: 3 * LAYER_BYTES // 2, 1: 3 * LAYER_BYTES // 2, 2: 3 * LAYER_BYTES // 2,
                  "cpu": 100 * LAYER_BYTES}
    device_map = infer_auto_device_map(model, max_memory=max_memory,
                                       no_split_module_classes=model._no_split_modules)
    assert set(device_map.values()) == {0, 1, 2, "cpu"}, device_map
    model = dispatch_model(model, device_map=device_map)
    with torch.no_grad():
        logits = model(ids.to("tpu:0")).logits
    # The offloaded layers and the head run on tpu:0, the main device.
    assert logits.device == torch.device("tpu:0")
    torch.testing.assert_close(logits.cpu(), logits_cpu, rtol=1e-5, atol=1e-5)
