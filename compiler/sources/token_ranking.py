"""Which tokens a draft vocabulary keeps: the source's tokens ranked, most likely first.

Without counts from the user's own text, the tokenizer is the best witness of how common a
token is: byte-level BPE learns its merges most frequent pair first, so a token made by an
early merge is a common one. The ranking is the model's own special tokens (bos, eos, pad: a
head that could never draft the end of a sequence would lose every last token), then the base
tokens no merge makes (single bytes) in id order, then merged tokens in merge order, then the
other tokens the tokenizer adds, then any id the model has beyond the tokenizer's. A source
without a tokenizer ranks by token id, specials first (a BPE vocabulary is numbered in merge
order anyway).

Counts (`counts_ranking`) put the most frequent first; ids without a count, and ties, keep the
tokenizer's order.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping

from ..ir import Architecture
from .info import SourceInfo


def tokenizer_ranking(info: SourceInfo, arch: Architecture) -> tuple[list[int], str]:
    """Every token id below `arch.vocab_size`, best first, and a few words on where the order came from."""
    document = dict(info.tokenizer_files).get("tokenizer.json")
    specials = [arch.tokens.bos, *arch.tokens.eos, arch.tokens.pad]
    if document is None:
        return _complete(specials, arch.vocab_size), "token ids (the source has no tokenizer.json), specials first"
    doc = json.loads(document)
    model = doc.get("model") or {}
    vocab: Mapping[str, int] = model.get("vocab") or {}
    if model.get("type") != "BPE" or not isinstance(vocab, dict):
        return _complete(specials, arch.vocab_size), "token ids (the tokenizer is not BPE), specials first"
    rank: dict[str, int] = {}
    for i, merge in enumerate(model.get("merges") or []):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        rank.setdefault(left + right, i)
    base = sorted(i for token, i in vocab.items() if token not in rank)
    merged = [vocab[token] for token in sorted((t for t in vocab if t in rank), key=rank.__getitem__)]
    added = sorted(int(t["id"]) for t in doc.get("added_tokens") or [])
    ranking = _complete([*specials, *base, *merged, *added], arch.vocab_size)
    return ranking, f"the tokenizer: specials, {len(base)} base tokens, then {len(merged)} merges in order"


def counts_ranking(counts: Mapping[int, int], fallback: list[int]) -> list[int]:
    """Token ids by count, highest first; equal counts (and ids not counted) in `fallback`'s order."""
    order = {token: i for i, token in enumerate(fallback)}
    return sorted(fallback, key=lambda token: (-counts.get(token, 0), order[token]))


def _complete(preferred: Iterable[int], vocab_size: int) -> list[int]:
    """`preferred` (duplicates and ids outside the model's vocabulary dropped), then every other id ascending."""
    seen: dict[int, None] = {}
    for token in preferred:
        if 0 <= token < vocab_size:
            seen.setdefault(token, None)
    return [*seen, *(i for i in range(vocab_size) if i not in seen)]
