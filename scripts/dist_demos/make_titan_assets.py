"""Writes what TorchTitan's llama3 debug model reads, made here with no hub access:

- <out>/tokenizer: a byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json) trained by
  the `tokenizers` library on the generated text, vocabulary < 2048 (the debug model's size);
- <out>/c4_test: a small text data set in C4's layout (json lines with a "text" field) that
  TorchTitan's `c4_test` loader reads with `datasets.load_dataset(path, split="train")`.

The text is deterministic (seeded), so every run and both the tpu and the CPU runs see the same
tokens.
"""

import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

WORDS = (
    "the a tensor device program compiles runs fast slow model layer weight gradient step loss "
    "falls rises shard gather reduce scatter rank host chip memory token attention head norm "
    "train data batch sequence learns predicts next word small large quick brown fox jumps over "
    "lazy dog river mountain city light dark green blue red yellow number one two three four"
).split()


def sentences(rng: random.Random, count: int):
    for _ in range(count):
        n = rng.randint(6, 18)
        words = [rng.choice(WORDS) for _ in range(n)]
        yield " ".join(words).capitalize() + "."


def main(out: str) -> None:
    rng = random.Random(1234)
    docs = [" ".join(sentences(rng, rng.randint(4, 12))) for _ in range(600)]
    os.makedirs(os.path.join(out, "c4_test"), exist_ok=True)
    with open(os.path.join(out, "c4_test", "c4-train.00000-of-00001.json"), "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")

    tok_dir = os.path.join(out, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)
    special = ["<|begin_of_text|>", "<|end_of_text|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(docs, trainer=trainer)
    tokenizer.save(os.path.join(tok_dir, "tokenizer.json"))
    config = {
        "bos_token": special[0],
        "eos_token": special[1],
        "add_bos_token": True,
        "add_eos_token": True,
        "model_max_length": 2048,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    print(f"titan assets in {out}: vocab {tokenizer.get_vocab_size()}, {len(docs)} documents")


if __name__ == "__main__":
    main(sys.argv[1])
