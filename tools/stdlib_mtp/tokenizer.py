"""A byte-level BPE trained by `tokenizers` on the training split, in Qwen3.5's tokenizer layout.

The pre-tokenizer is Qwen3.5's own split regex (as llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN35`
quotes it from the release's tokenizer.json, src/llama-vocab.cpp at the llama-cpp-python 0.3.36
vendored commit) followed by the GPT-2 byte-to-unicode mapping, so llama.cpp's `qwen35`
pre-tokenizer splits text exactly as this tokenizer does. llama.cpp's converter recognises a
tokenizer by hashing its output on a fixed text, and a new vocabulary has a new hash; the tests'
converter wrapper (tests/clients/convert_wrapper.py) names it `qwen35`, which is what the
regex is.
"""

from __future__ import annotations

import json
from pathlib import Path

QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
END_OF_TEXT = "<|endoftext|>"  # id 0: separates files; the model's eos, bos and pad


def train(texts: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[END_OF_TEXT], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def save(tok, directory: Path, context_length: int) -> None:
    tok.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": context_length,
        "bos_token": None,
        "eos_token": END_OF_TEXT,
        "pad_token": END_OF_TEXT,
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "added_tokens_decoder": {"0": {"content": END_OF_TEXT, "lstrip": False, "normalized": False,
                                       "rstrip": False, "single_word": False, "special": True}},
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
