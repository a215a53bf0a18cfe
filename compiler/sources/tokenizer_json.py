"""The Hugging Face `tokenizer.json` document for byte-level BPE, shared by every
tokenizer we write (converted from a GGUF vocabulary, or made for synthetic weights).

onnxruntime-genai 0.18.0 reads it through its built-in onnxruntime-extensions,
which parses BPE models (and rejects WordLevel ones).
"""

from __future__ import annotations

import functools
import json

# What a Hugging Face checkpoint ships for its tokenizer (and mtpc copies into a package).
TOKENIZER_FILES = (
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "merges.txt",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
)

# GPT-2's own split, built into the ByteLevel pre-tokenizer.
GPT2_PRE_TOKENIZER = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def added_token(token_id: int, content: str, *, special: bool) -> dict:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def byte_level_bpe(
    vocab: dict[str, int],
    merges: list[str],
    added: list[dict],
    *,
    normalizer: dict | None = None,
    pre_tokenizer: dict | None = None,
) -> dict:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer or GPT2_PRE_TOKENIZER,
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


def dump(obj: dict) -> bytes:
    # Insertion order is already deterministic (token id order); keep it for readable vocabularies.
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


@functools.lru_cache(maxsize=2)
def tokenizer_json_problem(data: bytes) -> str | None:
    """Why `data` is not a usable `tokenizer.json`, or None.

    It must be JSON with a `model` object; when the `tokenizers` library is installed
    (it comes with transformers) it must also load there, as the runtimes' loaders would.
    Remembered for the last few documents: a compile asks about the source's file when it
    reads it and again when it checks the package that copies it (loading a 250k-token
    vocabulary costs about a second).
    """
    try:
        text = data.decode("utf-8")
        doc = json.loads(text)
    except UnicodeDecodeError as e:
        return f"not UTF-8 text ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    except RecursionError:
        return "not valid JSON (nested too deeply)"
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        return "not a tokenizer: it has no `model` object"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        Tokenizer.from_str(text)
    except BaseException as e:  # the Rust side can panic (pyo3's PanicException is a BaseException)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return f"the tokenizers library cannot load it: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    return None
