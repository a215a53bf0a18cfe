"""The tokenizer of a synthetic source: a tiny deterministic byte-level BPE over its vocabulary.

Specials sit at the architecture's token ids, single bytes on the other ids (the bytes prompts use most first,
so a vocabulary smaller than 256 still encodes text), `<|extra_N|>` past 256 bytes. There are no merges, so a
text is one token per byte: `encode` gives the ids onnxruntime-genai's tokenizer gives for `tokenizer.json`,
which is how a fitted head (`fitted_head`) knows the ids of the prompts `mtpc tune` decodes.
"""

from __future__ import annotations

from ..ir import Architecture
from .tokenizer_json import added_token, byte_level_bpe, dump

# Bytes that prompts use most get ids first, so a vocabulary smaller than 256 still encodes text.
_BYTE_ORDER = (*range(0x20, 0x7F), 0x0A, 0x09, 0x0D, *(b for b in range(256) if not (0x20 <= b < 0x7F or b in (9, 10, 13))))


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE vocabularies."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shifted)
            shifted += 1
    return mapping


def _special_names(arch: Architecture) -> dict[int, str]:
    names = {arch.tokens.pad: "<|pad|>", arch.tokens.bos: "<|bos|>"}
    for eos in arch.tokens.eos:
        names[eos] = "<|endoftext|>" if eos == arch.tokens.eos[0] else f"<|eos_{eos}|>"
    return names


def byte_ids(arch: Architecture) -> dict[int, int]:
    """Byte -> its token id, for the bytes the vocabulary holds."""
    specials = _special_names(arch)
    order = iter(_BYTE_ORDER)
    found = {}
    for token_id in range(arch.vocab_size):
        if token_id in specials:
            continue
        byte = next(order, None)
        if byte is None:
            break
        found[byte] = token_id
    return found


def encode(arch: Architecture, text: str) -> tuple[int, ...] | None:
    """`text`'s token ids, or None when the vocabulary lacks one of its bytes."""
    ids = byte_ids(arch)
    data = text.encode("utf-8")
    return tuple(ids[b] for b in data) if all(b in ids for b in data) else None


def synthetic_tokenizer_files(arch: Architecture) -> tuple[tuple[str, bytes], ...]:
    """`tokenizer.json` and `tokenizer_config.json` of the synthetic vocabulary."""
    specials = _special_names(arch)
    byte_chars = _byte_to_unicode()
    by_id = {token_id: byte_chars[byte] for byte, token_id in byte_ids(arch).items()}
    vocab: dict[str, int] = {}
    added = []
    for token_id in range(arch.vocab_size):
        token = specials.get(token_id) or by_id.get(token_id)
        if token is None or token_id in specials:
            token = token or f"<|extra_{token_id}|>"
            added.append(added_token(token_id, token, special=True))
        vocab[token] = token_id
    tokenizer = byte_level_bpe(vocab, [], added)
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": specials[arch.tokens.bos],
        "eos_token": specials[arch.tokens.eos[0]],
        "pad_token": specials[arch.tokens.pad],
        "model_max_length": arch.context_length,
        "clean_up_tokenization_spaces": False,
    }
    return (("tokenizer.json", dump(tokenizer)), ("tokenizer_config.json", dump(config)))
