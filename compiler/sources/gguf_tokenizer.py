"""A GGUF's `tokenizer.*` metadata -> Hugging Face `tokenizer.json` + `tokenizer_config.json`.

onnxruntime-genai 0.18.0 loads tokenizers from these two files (through its
built-in onnxruntime-extensions): `tokenizer_config.json` must name a class it
knows and `tokenizer.json` must use a model it can parse (BPE; it rejects
WordLevel). GGUF's "gpt2" tokenizer model is byte-level BPE with tokens already
in byte-to-unicode form and merges as "a b" strings, so it converts directly.
Other tokenizer models (SentencePiece "llama", ...) are not converted: the
package then ships no tokenizer and `mtpc inspect` says so.
"""

from __future__ import annotations

import json
from typing import Callable

from gguf import Keys, TokenType

from ..ir import Architecture

# The pre-tokenizer split of Qwen2-family byte-level BPE. llama.cpp names it "qwen2";
# Qwen3.5 GGUFs say "qwen35", which we treat as the same split.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPLITS = {"qwen2": _QWEN2_SPLIT, "qwen35": _QWEN2_SPLIT}
_ADDED = (TokenType.CONTROL, TokenType.USER_DEFINED)

Getter = Callable[..., object]


def tokenizer_files(get: Getter, arch: Architecture, path: str) -> tuple[tuple[str, bytes], ...]:
    """`get(key, default, required=False)` reads one metadata value."""
    hf_json = get(Keys.Tokenizer.HF_JSON, "", required=False)
    model = get(Keys.Tokenizer.MODEL, "", required=False)
    if hf_json:
        tokenizer = json.loads(hf_json)
    elif model == "gpt2":
        tokenizer = _byte_level_bpe(get)
    else:
        return ()
    tokens = list(get(Keys.Tokenizer.LIST, [], required=False))
    config = _tokenizer_config(get, arch, tokens)
    return (("tokenizer.json", _dump(tokenizer)), ("tokenizer_config.json", _dump(config)))


def _byte_level_bpe(get: Getter) -> dict:
    tokens = list(get(Keys.Tokenizer.LIST))
    types = list(get(Keys.Tokenizer.TOKEN_TYPE, [], required=False)) or [TokenType.NORMAL] * len(tokens)
    merges = list(get(Keys.Tokenizer.MERGES, [], required=False))
    pre = str(get(Keys.Tokenizer.PRE, "default", required=False))
    added, vocab = [], {}
    for token_id, (token, kind) in enumerate(zip(tokens, types)):
        if TokenType(int(kind)) in _ADDED:
            added.append(
                {
                    "id": token_id,
                    "content": token,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": TokenType(int(kind)) is TokenType.CONTROL,
                }
            )
        else:
            vocab.setdefault(token, token_id)
    split = _SPLITS.get(pre)
    if split is None:
        # GPT-2's own split, built into the ByteLevel pre-tokenizer.
        pre_tokenizer = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        normalizer = None
    else:
        pre_tokenizer = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        }
        normalizer = {"type": "NFC"}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def _tokenizer_config(get: Getter, arch: Architecture, tokens: list[str]) -> dict:
    def content(token_id: int) -> str | None:
        return tokens[token_id] if 0 <= token_id < len(tokens) else None

    config: dict = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": bool(get(Keys.Tokenizer.ADD_BOS, False, required=False)),
        "add_eos_token": bool(get(Keys.Tokenizer.ADD_EOS, False, required=False)),
        "bos_token": content(arch.tokens.bos) if get(Keys.Tokenizer.BOS_ID, None, required=False) is not None else None,
        "eos_token": content(arch.tokens.eos[0]),
        "pad_token": content(arch.tokens.pad),
        "model_max_length": arch.context_length,
        "clean_up_tokenization_spaces": False,
    }
    template = get(Keys.Tokenizer.CHAT_TEMPLATE, "", required=False)
    if template:
        config["chat_template"] = template
    return config


def _dump(obj: dict) -> bytes:
    # Insertion order is already deterministic (token id order); keep it for readable vocabularies.
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
