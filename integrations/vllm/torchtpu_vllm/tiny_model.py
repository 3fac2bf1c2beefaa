"""Tiny random-weight models and a byte-level BPE tokenizer, made locally (no hub access), for
the tests, the demo and the benchmark: a Llama, and one model of each family vLLM users serve
whose attention or MLP differs (FAMILIES: Qwen2, Qwen3, Mistral with a sliding window, Gemma 2
with logit soft-capping, Mixtral and Qwen2-MoE mixtures of experts, GPT-OSS with attention sinks).

    python -m torchtpu_vllm.tiny_model OUT_DIR [--head-dim 16] [--layers 2] [--family llama]
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


# Small enough for a test: windows and soft caps small enough to matter at test lengths.
_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
              initializer_range=0.2, tie_word_embeddings=False)

FAMILIES = {
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {}),
    "mistral": ("MistralConfig", {"sliding_window": 12}),
    "gemma2": ("Gemma2Config", {"sliding_window": 12, "attn_logit_softcapping": 4.0,
                                "final_logit_softcapping": 6.0, "query_pre_attn_scalar": 16,
                                "hidden_activation": "gelu_pytorch_tanh",
                                "tie_word_embeddings": True}),
    "mixtral": ("MixtralConfig", {"num_local_experts": 4, "num_experts_per_tok": 2,
                                  "sliding_window": None}),
    "qwen2_moe": ("Qwen2MoeConfig", {"num_experts": 4, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 32,
                                     "shared_expert_intermediate_size": 64,
                                     "decoder_sparse_step": 1}),
    "gpt_oss": ("GptOssConfig", {"num_local_experts": 4, "num_experts_per_tok": 2,
                                 "sliding_window": 12, "intermediate_size": 64,
                                 "layer_types": ["sliding_attention", "full_attention"],
                                 "rope_parameters": {"rope_type": "yarn", "factor": 2.0,
                                                     "beta_fast": 32.0, "beta_slow": 1.0,
                                                     "truncate": False,
                                                     "original_max_position_embeddings": 256,
                                                     "rope_theta": 10000.0}}),
}


def make_tiny_model(out_dir: str, family: str, seed: int = 0) -> str:
    """A tiny random model of `family` (a FAMILIES key, or "llama"), float32, in out_dir.
    Idempotent."""
    if family == "llama":
        return make_tiny_llama(out_dir, seed=seed)
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return out_dir
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    cls_name, extra = FAMILIES[family]
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = make_tokenizer(out_dir)
    config = getattr(transformers, cls_name)(
        vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        **{**_SHAPE, **extra})
    config.torch_dtype = "float32"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # some families start biases, sinks and norms at zero or one
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("bias" in name or "sinks" in name):
                p.normal_(0.5 if "sinks" in name else 0.0, 1.0 if "sinks" in name else 0.2)
    model.save_pretrained(out_dir)
    return out_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir")
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--family", default="llama", choices=["llama", *FAMILIES])
    args = parser.parse_args()
    if args.family == "llama":
        print(make_tiny_llama(args.out_dir, head_dim=args.head_dim, layers=args.layers))
    else:
        print(make_tiny_model(args.out_dir, args.family))


if __name__ == "__main__":
    main()
