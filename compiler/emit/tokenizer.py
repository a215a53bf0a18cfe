"""Tokenizer files of the package.

A source that ships tokenizer files (a Hugging Face checkpoint's own files, or
the `tokenizer.json` the GGUF source builds from `tokenizer.ggml.*`) has them
copied as they are. A synthetic source gets a tiny deterministic byte-level
BPE tokenizer over its vocabulary, so prompts can be encoded and decoded by
onnxruntime-genai 0.18.0 (whose built-in tokenizer reads `tokenizer.json` +
`tokenizer_config.json`, accepts BPE models and classes such as
`Qwen2Tokenizer`, and rejects WordLevel models).
"""

from __future__ import annotations

from ..ir import Architecture, ModelIR
from ..sources.info import DeferredFiles
from ..sources.tokenizer_json import added_token, byte_level_bpe, dump
from .artifact import Artifact, EmitContext

# Bytes that prompts use most get ids first, so a vocabulary smaller than 256 still encodes text.
_BYTE_ORDER = (*range(0x20, 0x7F), 0x0A, 0x09, 0x0D, *(b for b in range(256) if not (0x20 <= b < 0x7F or b in (9, 10, 13))))


def emit_tokenizer(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    if isinstance(ctx.info.tokenizer, DeferredFiles):
        # Built from the source's metadata on first read (a second for a 248k-token vocabulary).
        info = ctx.info
        return [
            Artifact(relpath, chunks=lambda relpath=relpath: iter([dict(info.tokenizer_files)[relpath]]), deferred=True)
            for relpath in sorted(info.tokenizer.names)
        ]
    files = ctx.info.tokenizer_files
    if not files and ir.source.kind == "synthetic":
        files = synthetic_tokenizer_files(ir.architecture)
    return [Artifact(relpath, content) for relpath, content in sorted(files)]


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


def synthetic_tokenizer_files(arch: Architecture) -> tuple[tuple[str, bytes], ...]:
    """Specials at the architecture's token ids, single bytes on the other ids, `<|extra_N|>` past 256 bytes."""
    specials = _special_names(arch)
    byte_chars = _byte_to_unicode()
    byte_tokens = iter(byte_chars[b] for b in _BYTE_ORDER)
    vocab: dict[str, int] = {}
    added = []
    for token_id in range(arch.vocab_size):
        token = specials.get(token_id) or next(byte_tokens, None)
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
