"""Tiny hub-free models for the real CPU engine: a Llama target, a draft that is the target, a draft that is not.

`specinfer models make DIR` writes, deterministically (same files, same bytes, every run):

    DIR/target/        Llama, 2 layers, hidden 256, 4 heads of 64 (vLLM's CPU attention needs
                       head_dim 64; 16 fails), its BPE tokenizer trained on a fixed text
    DIR/draft-same/    the target's exact weights: a draft that is always right (acceptance ~1)
    DIR/draft-other/   the same shape and tokenizer, other random weights (acceptance ~0)

and, unless `--no-drafters`, the seed-method drafters of drafters.py (EAGLE, EAGLE-3, DFlash heads and
two MiMo targets carrying an MTP layer), random and hand-set variants, from a cache.

The writing runs inside the engine environment (torch, transformers and tokenizers live there,
not in the project's venv): `make_models` is that code, `main` its entry point.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

TARGET = "target"
DRAFT_SAME = "draft-same"
DRAFT_OTHER = "draft-other"
VOCAB_SIZE = 512
TARGET_SEED = 1234
OTHER_SEED = 4321

# The tokenizer's training text: fixed, so the merges (and so the vocabulary) never change.
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "speculative decoding drafts tokens that the target model verifies in one step",
    "a draft model proposes, the target model accepts or rejects each drafted token",
    "count one two three four five six seven eight nine ten eleven twelve",
    "vLLM serves large language models with paged attention and continuous batching",
    "kubernetes runs the engine in a pod and prometheus scrapes its metrics",
    "to be or not to be, that is the question",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
]


@dataclass(frozen=True)
class TinyLlama:
    """The shape every tiny model shares (the draft must share the target's vocabulary)."""

    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4  # head_dim 64
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    vocab_size: int = VOCAB_SIZE


def train_tokenizer(special: tuple[str, ...] = ("<unk>", "<s>", "</s>")):
    """A byte-level BPE tokenizer over CORPUS, wrapped for transformers' save_pretrained."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(special), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="</s>")


def build_model(seed: int, shape: TinyLlama, tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers, num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads, max_position_embeddings=shape.max_position_embeddings,
        vocab_size=shape.vocab_size, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, dtype="bfloat16")
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval()


def write(model, tokenizer, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def make_models(root: Path, shape: TinyLlama = TinyLlama()) -> dict[str, Path]:
    """Write the three models under `root`; returns name -> folder."""
    tokenizer = train_tokenizer()
    if len(tokenizer) > shape.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, more than the model's {shape.vocab_size}")
    target = build_model(TARGET_SEED, shape, tokenizer)
    folders = {name: root / name for name in (TARGET, DRAFT_SAME, DRAFT_OTHER)}
    write(target, tokenizer, folders[TARGET])
    write(target, tokenizer, folders[DRAFT_SAME])
    write(build_model(OTHER_SEED, shape, tokenizer), tokenizer, folders[DRAFT_OTHER])
    return folders


def main(argv: list[str] | None = None) -> None:
    """`python -m specinfer.dev.cpu_engine.models DIR [--no-drafters]`, run by the engine environment's
    interpreter."""
    args = sys.argv[1:] if argv is None else argv
    drafters = "--no-drafters" not in args
    args = [arg for arg in args if arg != "--no-drafters"]
    if len(args) != 1:
        sys.exit("usage: python -m specinfer.dev.cpu_engine.models DIR [--no-drafters]")
    folders = make_models(Path(args[0]))
    if drafters:
        from specinfer.dev.cpu_engine.drafters import cached_drafters

        folders.update(cached_drafters(Path(args[0]), folders[TARGET], train_tokenizer()))
    for name, folder in folders.items():
        print(f"{name}: {folder}")


if __name__ == "__main__":
    main()
