"""Fine-tunes a tiny Hugging Face Llama with the Transformers Trainer on tpu, unchanged: the Trainer
(through Accelerate) finds the device with torch.accelerator, as it finds "cuda".

    python examples/hf_trainer_finetune.py [--steps 8]

The model is built from a config with random weights (no hub access); the same Trainer run on the
CPU follows, and the losses are compared step by step.
"""

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

import torchtpu  # noqa: F401  (registers the tpu device; `import torch` alone also loads it)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--out", default="/tmp/torchtpu-trainer-example")
    args = p.parse_args()

    results = {d: train(d, args.steps, f"{args.out}-{d}") for d in ("tpu", "cpu")}
    for device, losses in results.items():
        print(f"{device}: losses {[round(x, 5) for x in losses]}")
    worst = max(abs(a - b) for a, b in zip(results["tpu"], results["cpu"]))
    print(f"max |loss tpu - loss cpu| = {worst:.1e}")
    assert worst < 1e-4, worst


def train(device: str, steps: int, out: str) -> list[float]:
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=256, intermediate_size=128,
                         max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": ids, "labels": ids}
            for ids in (torch.randint(0, 256, (16,), generator=g) for _ in range(32))]
    training = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=4,
                                 learning_rate=1e-3, logging_steps=1, report_to="none",
                                 save_strategy="no", seed=0, use_cpu=device == "cpu",
                                 disable_tqdm=True)
    trainer = Trainer(model=model, args=training, train_dataset=data)
    trainer.train()
    assert next(trainer.model.parameters()).device.type == device
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


if __name__ == "__main__":
    main()
