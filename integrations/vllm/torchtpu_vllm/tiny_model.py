"""A tiny random-weight Llama and a byte-level BPE tokenizer, made locally (no hub access), for
the tests, the demo and the benchmark:

    python -m torchtpu_vllm.tiny_model OUT_DIR [--head-dim 16] [--layers 2]
"""

from __future__ import annotations

import argparse
import os

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves language models with paged attention and continuous batching.",
    "A tensor processing unit runs XLA programs compiled from PyTorch.",
    "Hello, how are you today? I am fine, thank you.",
    "Once upon a time there was a tiny model that could only babble.",
    "Paris is the capital of France. Berlin is the capital of Germany.",
    "One two three four five six seven eight nine ten eleven twelve.",
]


def make_tokenizer(out_dir: str, vocab_size: int = 384):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def make_tiny_llama(
    out_dir: str,
    *,
    head_dim: int = 16,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    layers: int = 2,
    intermediate: int = 128,
    max_position_embeddings: int = 512,
    seed: int = 0,
) -> str:
    """Writes config, random weights (seeded, spread wide enough that greedy argmax is not a
    near-tie) and tokenizer to out_dir; returns out_dir. Idempotent."""
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return out_dir
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    os.makedirs(out_dir, exist_ok=True)
    tokenizer = make_tokenizer(out_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=head_dim * num_heads,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out_dir)
    return out_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir")
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    print(make_tiny_llama(args.out_dir, head_dim=args.head_dim, layers=args.layers))


if __name__ == "__main__":
    main()
