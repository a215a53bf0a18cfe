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

from .constants import Keys, TokenType

from ...ir import Architecture
from ..info import DeferredFiles
from ...util.diagnostics import SourceError
from ..tokenizer_json import GPT2_PRE_TOKENIZER, added_token, byte_level_bpe, dump, tokenizer_json_problem

# The pre-tokenizer split of Qwen2-family byte-level BPE. llama.cpp names it "qwen2";
# Qwen3.5 GGUFs say "qwen35", which we treat as the same split.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPLITS = {"qwen2": _QWEN2_SPLIT, "qwen35": _QWEN2_SPLIT}
_ADDED = (TokenType.CONTROL, TokenType.USER_DEFINED)

Getter = Callable[..., object]


def tokenizer_files(get: Getter, arch: Architecture, path: str) -> DeferredFiles | tuple[()]:
    """`get(key, default, required=False)` reads one metadata value.

    Whether the GGUF has a tokenizer we can convert is known from two keys; the
    conversion itself waits until the files are asked for.
    """
    hf_json = get(Keys.Tokenizer.HF_JSON, "", required=False)
    model = get(Keys.Tokenizer.MODEL, "", required=False)
    if not hf_json and model != "gpt2":
        return ()
    return DeferredFiles(("tokenizer.json", "tokenizer_config.json"), lambda: _build(get, arch, hf_json, path))


def _build(get: Getter, arch: Architecture, hf_json: str, path: str) -> tuple[tuple[str, bytes], ...]:
    if hf_json:
        # An embedded tokenizer.json is parsed (and loaded) before it is copied into the package.
        problem = tokenizer_json_problem(hf_json.encode("utf-8"))
        if problem is not None:
            raise SourceError(f"{path}: GGUF metadata key {Keys.Tokenizer.HF_JSON!r}: {problem}")
    tokenizer = json.loads(hf_json) if hf_json else _byte_level_bpe(get, path)
    tokens = list(get(Keys.Tokenizer.LIST, [], required=False))
    config = _tokenizer_config(get, arch, tokens)
    return (("tokenizer.json", dump(tokenizer)), ("tokenizer_config.json", dump(config)))


def _byte_level_bpe(get: Getter, path: str) -> dict:
    tokens = list(get(Keys.Tokenizer.LIST))
    types = list(get(Keys.Tokenizer.TOKEN_TYPE, [], required=False)) or [TokenType.NORMAL] * len(tokens)
    merges = list(get(Keys.Tokenizer.MERGES, [], required=False))
    pre = str(get(Keys.Tokenizer.PRE, "default", required=False))
    added, vocab = [], {}
    known = {int(t) for t in TokenType}
    for token_id, (token, kind) in enumerate(zip(tokens, types)):
        if int(kind) not in known:
            raise SourceError(f"{path}: GGUF metadata key {Keys.Tokenizer.TOKEN_TYPE!r}: token {token_id} has unknown type {kind}")
        if TokenType(int(kind)) in _ADDED:
            added.append(added_token(token_id, token, special=TokenType(int(kind)) is TokenType.CONTROL))
        else:
            vocab.setdefault(token, token_id)
    split = _SPLITS.get(pre)
    if split is None:
        pre_tokenizer, normalizer = GPT2_PRE_TOKENIZER, None
    else:
        pre_tokenizer = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        }
        normalizer = {"type": "NFC"}
    return byte_level_bpe(vocab, merges, added, normalizer=normalizer, pre_tokenizer=pre_tokenizer)


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

