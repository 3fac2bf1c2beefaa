"""Training acceptance with real model libraries (Transformers, Diffusers) at tiny sizes.

Every model is built from a config with random weights under a fixed seed (no hub, no network),
copied once to CPU and once to tpu, and run through the same steps on both; the tpu run must
match CPU PyTorch and must not touch the CPU fallback.

Tolerances. Losses of float32 runs must agree within 1e-4 relative and final parameters within
1e-3 (the acceptance criteria). Parameter gradients are compared per tensor with rtol 1e-4 and
an absolute floor of 1e-5 times the largest gradient magnitude of the whole model: XLA sums and
matmuls accumulate in a different order than CPU ATen, and that rounding is proportional to the
terms being summed, not to the result, so a gradient that is mathematically zero (the key bias
of an attention layer: softmax ignores a per-row shift) is noise of the model's gradient scale
on both devices and cannot be compared relatively.
"""

from __future__ import annotations

import copy

import pytest
import torch

import torchtpu

transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")


class NoFallbacks:
    """Asserts that the block ran without a single CPU fallback (counted by torchtpu.metrics)."""

    def __enter__(self):
        torch.tpu.synchronize()
        self.before = torchtpu.metrics()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        torch.tpu.synchronize()
        after = torchtpu.metrics()
        by_op = {
            op: n - self.before["cpu_fallbacks_by_op"].get(op, 0)
            for op, n in after["cpu_fallbacks_by_op"].items()
            if n != self.before["cpu_fallbacks_by_op"].get(op, 0)
        }
        assert after["cpu_fallbacks"] == self.before["cpu_fallbacks"], f"CPU fallbacks: {by_op}"
        return False


def assert_grads_close(model_cpu, model_tpu, rtol=1e-4, floor=1e-5):
    grads_cpu = {n: p.grad for n, p in model_cpu.named_parameters() if p.grad is not None}
    grads_tpu = {n: p.grad.cpu() for n, p in model_tpu.named_parameters() if p.grad is not None}
    assert grads_cpu.keys() == grads_tpu.keys()
    assert grads_cpu, "no gradients"
    scale = max(g.abs().max().item() for g in grads_cpu.values())
    for name, g in grads_cpu.items():
        torch.testing.assert_close(grads_tpu[name], g, rtol=rtol, atol=floor * scale,
                                   msg=lambda m, name=name: f"grad of {name}: {m}")


def assert_params_close(model_cpu, model_tpu, rtol, atol):
    for (name, p_cpu), (_, p_tpu) in zip(model_cpu.named_parameters(),
                                         model_tpu.named_parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"parameter {name}: {m}")


def both(model):
    """(cpu copy, tpu copy) of a CPU model."""
    return copy.deepcopy(model), copy.deepcopy(model).to("tpu")


# --------------------------------------------------------------------------------------------
# Llama: 30 AdamW steps, float32 and bfloat16 autocast


def tiny_llama(attn_implementation="sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, intermediate_size=128,
                      max_position_embeddings=64,
                      attn_implementation=attn_implementation)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    return model, ids


def train_llama(model, ids, device, steps, autocast_dtype=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = ids.to(device)
    losses = []
    for _ in range(steps):
        with torch.autocast(device, dtype=autocast_dtype or torch.float32,
                            enabled=autocast_dtype is not None):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return torch.stack(losses).cpu()


# sdpa is what Transformers picks by default (aten::scaled_dot_product_attention); eager spells
# attention out with matmul, mask add and softmax.
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_llama_adamw_float32_matches_cpu(attn):
    model, ids = tiny_llama(attn)
    m_cpu, m_tpu = both(model)
    with NoFallbacks():
        losses_tpu = train_llama(m_tpu, ids, "tpu", 30)
    losses_cpu = train_llama(m_cpu, ids, "cpu", 30)
    assert losses_cpu[-1] < losses_cpu[0] * 0.8
    torch.testing.assert_close(losses_tpu, losses_cpu, rtol=1e-4, atol=0)
    assert_params_close(m_cpu, m_tpu, rtol=1e-3, atol=1e-3)


def test_llama_adamw_bf16_autocast_tracks_cpu_autocast():
    model, ids = tiny_llama()
    m_cpu, m_tpu = both(model)
    with NoFallbacks():
        losses_tpu = train_llama(m_tpu, ids, "tpu", 30, torch.bfloat16)
    losses_cpu = train_llama(m_cpu, ids, "cpu", 30, torch.bfloat16)
    assert losses_tpu[-1] < losses_tpu[0] * 0.8
    # bfloat16 has 8 mantissa bits, and the two autocast policies (CUDA's op lists on tpu, CPU's
    # own on CPU) cast a few ops differently: 2% per step is the acceptance bound.
    torch.testing.assert_close(losses_tpu, losses_cpu, rtol=2e-2, atol=0)


def test_llama_compiled_training_steps_match_cpu():
    # The same model under torch.compile(backend="tpu"): one program per graph instead of one per
    # op, built from the same lowerings, so it must agree with CPU just as eager does.
    model, ids = tiny_llama()
    m_cpu, m_tpu = both(model)
    compiled = torch.compile(m_tpu, backend="tpu")
    try:
        with NoFallbacks():
            losses_tpu = train_llama(compiled, ids, "tpu", 4)
    finally:
        torch._dynamo.reset()
    losses_cpu = train_llama(m_cpu, ids, "cpu", 4)
    torch.testing.assert_close(losses_tpu, losses_cpu, rtol=1e-4, atol=0)
    assert_params_close(m_cpu, m_tpu, rtol=1e-3, atol=1e-3)


def test_module_to_tpu_keeps_tied_parameters_tied():
    # Module._apply keeps a Parameter's identity (`param.data = moved`) only when
    # _has_compatible_shallow_copy_type says the tpu tensor may replace the CPU one; otherwise
    # it makes new Parameters and silently unties shared weights (GPT-2's lm_head and wte).
    lin = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(lin, torch.nn.Linear(4, 4))
    model[1].weight = lin.weight
    weight = lin.weight
    model.to("tpu")
    assert model[0].weight is weight and model[1].weight is weight
    assert weight.device.type == "tpu"
    assert len(list(model.parameters())) == 3
    model.to("cpu")
    assert model[1].weight is weight and weight.device.type == "cpu"


# --------------------------------------------------------------------------------------------
# BERT and GPT-2: one forward and backward


def forward_backward(model, inputs):
    m_cpu, m_tpu = both(model)
    loss_cpu = m_cpu(**inputs).loss
    loss_cpu.backward()
    with NoFallbacks():
        loss_tpu = m_tpu(**{k: v.to("tpu") for k, v in inputs.items()}).loss
        loss_tpu.backward()
        loss_tpu = loss_tpu.cpu()
    torch.testing.assert_close(loss_tpu, loss_cpu.detach(), rtol=1e-5, atol=1e-6)
    assert_grads_close(m_cpu, m_tpu)


def test_bert_sequence_classification_forward_backward():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    # Dropout off: masks drawn on tpu are not CPU's (see test_cnn_training for live dropout).
    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, num_labels=3,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(cfg).train()
    ids = torch.randint(0, 128, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0  # padding exercises the attention mask
    forward_backward(model, dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids),
                                 labels=torch.tensor([0, 2])))


def test_mixtral_moe_forward_backward():
    """Transformers routes the experts of MoE models on the "tpu" device type through
    torch.nn.functional.grouped_mm and counts tokens per expert with an integer histc."""
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                        num_experts_per_tok=2, max_position_embeddings=64)
    model = MixtralForCausalLM(cfg).train()
    ids = torch.randint(0, 128, (2, 12))
    forward_backward(model, dict(input_ids=ids, labels=ids))


def test_gpt2_lm_head_forward_backward():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                     eos_token_id=0)
    model = GPT2LMHeadModel(cfg).train()
    ids = torch.randint(0, 128, (2, 12))
    forward_backward(model, dict(input_ids=ids, labels=ids))


# --------------------------------------------------------------------------------------------
# More model families: one forward and backward each, in eval mode (no dropout or layer drop)


def _zoo_model(name):
    """(model, inputs) for a tiny member of each family, built from a config."""
    import transformers as tf

    ids = torch.randint(0, 100, (2, 12))
    if name == "t5":
        cfg = tf.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                          decoder_start_token_id=0, pad_token_id=0)
        return tf.T5ForConditionalGeneration(cfg), dict(input_ids=ids,
                                                        labels=ids[:, :6].contiguous())
    if name == "mistral_sliding_window":
        cfg = tf.MistralConfig(vocab_size=100, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               sliding_window=4)
        return tf.MistralForCausalLM(cfg), dict(input_ids=ids, labels=ids)
    if name == "qwen2_moe":
        cfg = tf.Qwen2MoeConfig(vocab_size=100, hidden_size=32, intermediate_size=64,
                                moe_intermediate_size=16, shared_expert_intermediate_size=32,
                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                num_experts=4, num_experts_per_tok=2)
        return tf.Qwen2MoeForCausalLM(cfg), dict(input_ids=ids, labels=ids)
    if name == "vit":
        cfg = tf.ViTConfig(image_size=16, patch_size=4, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=4, num_labels=3)
        return tf.ViTForImageClassification(cfg), dict(pixel_values=torch.randn(2, 3, 16, 16),
                                                       labels=torch.tensor([0, 2]))
    if name == "wav2vec2_ctc":  # weight-normed positional conv, CTC loss
        cfg = tf.Wav2Vec2Config(vocab_size=20, hidden_size=32, intermediate_size=64,
                                num_hidden_layers=2, num_attention_heads=4, conv_dim=(16, 16),
                                conv_stride=(5, 2), conv_kernel=(10, 3),
                                num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                mask_time_prob=0.0)
        return tf.Wav2Vec2ForCTC(cfg), dict(input_values=torch.randn(2, 800),
                                            labels=torch.randint(1, 20, (2, 5)))
    raise ValueError(name)


@pytest.mark.parametrize("name", ["t5", "mistral_sliding_window", "qwen2_moe", "vit",
                                  "wav2vec2_ctc"])
def test_model_family_forward_backward(name):
    torch.manual_seed(0)
    model, inputs = _zoo_model(name)
    forward_backward(model.eval(), inputs)


# --------------------------------------------------------------------------------------------
# Diffusers UNet2DModel: forward and backward


def test_diffusers_unet2d_forward_backward():
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    # The tiny configuration of diffusers' own UNet2DModel tests.
    model = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=2,
                        block_out_channels=(32, 64),
                        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                        up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    sample = torch.randn(2, 3, 32, 32)
    timestep = torch.tensor([10, 500])
    target = torch.randn(2, 3, 32, 32)
    m_cpu, m_tpu = both(model)
    out_cpu = m_cpu(sample, timestep).sample
    torch.nn.functional.mse_loss(out_cpu, target).backward()
    with NoFallbacks():
        out_tpu = m_tpu(sample.to("tpu"), timestep.to("tpu")).sample
        torch.nn.functional.mse_loss(out_tpu, target.to("tpu")).backward()
        out_tpu = out_tpu.cpu()
    torch.testing.assert_close(out_tpu, out_cpu.detach(), rtol=1e-4, atol=1e-5)
    assert_grads_close(m_cpu, m_tpu)
