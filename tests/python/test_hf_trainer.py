"""Transformers' Trainer (through Accelerate) on tpu with no user code change.

The same tiny Llama (built from a config under a fixed seed, no hub) is trained by an unchanged
`Trainer(model, TrainingArguments(...))` on tpu and, with `use_cpu=True`, on the CPU, over the
same data in the same order (the Trainer's sampler draws its permutation from a CPU generator
seeded by `args.seed`). No torchtpu code is involved beyond `import torch`: Accelerate >= 1.16
picks the device through `torch.accelerator`, which reports torchtpu's PrivateUse1 device.

The model and batch shapes are those of test_hf_models' Llama tests, so in one pytest process
the two files share their compiled programs.

Tolerances: float32 losses and gradient norms within 1e-4 relative and final parameters within
1e-3 (as in test_hf_models: XLA sums and matmuls accumulate in a different order than CPU ATen).
bfloat16 autocast losses within 2e-2: 8 mantissa bits, and the two autocast policies (CUDA's op
lists on tpu, CPU's own on CPU) cast a few ops differently.
"""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainingArguments,
)

STEPS = 4


@pytest.fixture(scope="module")
def model_and_data():
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, intermediate_size=128,
                      max_position_embeddings=64)
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    data = []
    for _ in range(16):
        ids = torch.randint(0, 256, (16,), generator=g)
        data.append({"input_ids": ids, "labels": ids})
    return model, data


class SeenByForward:
    """Records, from inside the model (the first layer's MLP output projection), where the
    activations live, their dtype and the autocast state of the tpu device: what the user's
    model sees, whatever the Trainer and Accelerate wrap around its forward."""

    def __init__(self, model):
        self.calls = []
        model.model.layers[0].mlp.down_proj.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.calls.append(dict(device=output.device, dtype=output.dtype,
                               autocast=torch.is_autocast_enabled("tpu"),
                               autocast_dtype=torch.get_autocast_dtype("tpu")))


def train(model_and_data, device, out_dir, **overrides):
    model0, data = model_and_data
    model = copy.deepcopy(model0)
    seen = SeenByForward(model)
    kwargs = dict(output_dir=str(out_dir), max_steps=STEPS, per_device_train_batch_size=2,
                  per_device_eval_batch_size=2, learning_rate=1e-3, logging_steps=1,
                  report_to="none", save_strategy="no", seed=0, use_cpu=device == "cpu",
                  disable_tqdm=True)
    resume = overrides.pop("resume_from_checkpoint", None)
    kwargs.update(overrides)
    trainer = Trainer(model=model, args=TrainingArguments(**kwargs), train_dataset=data,
                      eval_dataset=data[:4])
    trainer.train(resume_from_checkpoint=resume)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return trainer, logs, seen


def losses(logs):
    return torch.tensor([h["loss"] for h in logs], dtype=torch.float64)


def grad_norms(logs):
    return torch.tensor([h["grad_norm"] for h in logs], dtype=torch.float64)


def assert_params_close(model_ref, model_tpu, rtol=1e-3, atol=1e-3):
    for (name, p_ref), (_, p_tpu) in zip(model_ref.named_parameters(),
                                         model_tpu.named_parameters()):
        assert p_tpu.device.type == "tpu", name
        torch.testing.assert_close(p_tpu.detach().cpu(), p_ref.detach().cpu(), rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"parameter {name}: {m}")


def test_accelerator_device_is_tpu():
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        accelerator = Accelerator()
        assert accelerator.device.type == "tpu"
        loader = accelerator.prepare(torch.utils.data.DataLoader(torch.arange(8.0), batch_size=4))
        batches = list(loader)
        assert [b.device.type for b in batches] == ["tpu", "tpu"]
        torch.testing.assert_close(torch.cat([b.cpu() for b in batches]), torch.arange(8.0))
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


def test_trainer_float32_grad_accumulation_clipping_and_evaluate_match_cpu(model_and_data,
                                                                           tmp_path):
    # Two micro-batches per step and a clipping threshold below the gradient norms (about 1.8),
    # so every step accumulates and clips.
    opts = dict(gradient_accumulation_steps=2, max_grad_norm=0.5)
    tr_tpu, logs_tpu, seen = train(model_and_data, "tpu", tmp_path / "tpu", **opts)
    # (Accelerate's state is a process-wide singleton that the CPU run's arguments reset.)
    assert tr_tpu.args.device == torch.device("tpu:0")
    assert tr_tpu.accelerator.device.type == "tpu"
    ev_tpu = tr_tpu.evaluate()
    assert seen.calls[-1]["device"].type == "tpu"
    tr_cpu, logs_cpu, _ = train(model_and_data, "cpu", tmp_path / "cpu", **opts)
    ev_cpu = tr_cpu.evaluate()

    assert len(seen.calls) == 2 * STEPS + 2  # micro-batches, then evaluation's 4 rows by 2
    assert all(c["device"].type == "tpu" and not c["autocast"] and c["dtype"] == torch.float32
               for c in seen.calls)

    assert len(logs_tpu) == len(logs_cpu) == STEPS
    torch.testing.assert_close(losses(logs_tpu), losses(logs_cpu), rtol=1e-4, atol=0)
    torch.testing.assert_close(grad_norms(logs_tpu), grad_norms(logs_cpu), rtol=1e-4, atol=0)
    assert (grad_norms(logs_cpu) > 0.5).all(), "the clipping threshold must bite"
    assert_params_close(tr_cpu.model, tr_tpu.model)
    assert abs(ev_tpu["eval_loss"] - ev_cpu["eval_loss"]) <= 1e-4 * abs(ev_cpu["eval_loss"])


def test_trainer_bf16_uses_tpu_autocast_and_tracks_cpu(model_and_data, tmp_path):
    tr_tpu, logs_tpu, seen = train(model_and_data, "tpu", tmp_path / "tpu", bf16=True)
    _, logs_cpu, _ = train(model_and_data, "cpu", tmp_path / "cpu", bf16=True)
    assert len(seen.calls) == STEPS
    assert all(c["device"].type == "tpu" and c["autocast"] and c["autocast_dtype"] == torch.bfloat16
               and c["dtype"] == torch.bfloat16 for c in seen.calls)
    # Parameters stay float32 (autocast casts activations, not weights).
    assert all(p.dtype == torch.float32 for p in tr_tpu.model.parameters())
    torch.testing.assert_close(losses(logs_tpu), losses(logs_cpu), rtol=2e-2, atol=0)


def test_trainer_checkpoint_resume_and_save_model(model_and_data, tmp_path):
    out = tmp_path / "run"
    full, logs_full, _ = train(model_and_data, "tpu", out, save_strategy="steps", save_steps=2)
    checkpoint = out / "checkpoint-2"
    assert (checkpoint / "optimizer.pt").is_file() and (checkpoint / "model.safetensors").is_file()

    # A fresh Trainer resumes from step 2: model, AdamW state, scheduler and data position come
    # back from the checkpoint, so steps 3 and 4 repeat the uninterrupted run's.
    resumed, logs_resumed, seen = train(model_and_data, "tpu", tmp_path / "resumed",
                                        resume_from_checkpoint=str(checkpoint))
    # (The log history carries the checkpoint's first two entries; the forward ran twice.)
    assert [h["step"] for h in logs_resumed] == [1, 2, 3, 4]
    assert len(seen.calls) == 2 and all(c["device"].type == "tpu" for c in seen.calls)
    torch.testing.assert_close(losses(logs_resumed[2:]), losses(logs_full[2:]), rtol=1e-5, atol=0)
    assert_params_close(full.model, resumed.model, rtol=1e-5, atol=1e-6)

    # save_model writes the tpu parameters; loading them on the CPU gives the same values.
    resumed.save_model(str(tmp_path / "saved"))
    loaded = LlamaForCausalLM.from_pretrained(str(tmp_path / "saved"))
    assert_params_close(loaded, resumed.model, rtol=0, atol=0)
