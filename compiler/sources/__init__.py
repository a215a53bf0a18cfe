"""Checkpoint sources: what a checkpoint is (metadata only) and its weights (lazily).

Each kind lives in its own module and provides `describe(ref) -> SourceInfo`
(cheap: metadata only, used by lowering, `inspect` and `plan`) and
`open_weights(ref, info) -> WeightStore` (canonical names and conventions, see
`mtpc.weights`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from ..ir import Architecture, SourceRef, SourceTensor
from ..weights import WeightStore

Files = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class DeferredFiles:
    """Files whose names are known from metadata but whose bytes are built on first use.

    A GGUF's vocabulary (~250k tokens and merges) takes a second to turn into
    `tokenizer.json`; `describe()` must stay instant for `inspect` and `plan`.
    """

    names: tuple[str, ...]
    build: Callable[[], Files] = field(repr=False, compare=False)


@dataclass(frozen=True)
class SourceInfo:
    architecture: Architecture
    # Tensor groups and their storage types, for `inspect` (e.g. {"attn_q": "Q4_0"}).
    storage: tuple[tuple[str, str], ...] = ()
    # Tokenizer files the source can provide: (relpath, bytes) pairs, or built on demand.
    tokenizer: Files | DeferredFiles = field(default=(), repr=False)
    # Free-form facts for `inspect` (format version, file size, ...).
    facts: tuple[tuple[str, object], ...] = ()
    # How the checkpoint was read that the user should know (a fallback taken); `compile` and `plan` print them.
    notes: tuple[str, ...] = ()
    # Every weight the source serves under its canonical name, as stored (metadata only).
    tensors: tuple[SourceTensor, ...] = ()
    # What the checkpoint states about itself for the model card (`base_model`, `license`); see card_facts.py.
    card: tuple[tuple[str, str], ...] = ()

    @property
    def has_mtp_head(self) -> bool:
        return self.architecture.has_mtp_head

    @property
    def tokenizer_names(self) -> tuple[str, ...]:
        if isinstance(self.tokenizer, DeferredFiles):
            return self.tokenizer.names
        return tuple(name for name, _ in self.tokenizer)

    @cached_property
    def tokenizer_files(self) -> Files:
        return self.tokenizer.build() if isinstance(self.tokenizer, DeferredFiles) else self.tokenizer


def _module(kind: str):
    if kind == "synthetic":
        from . import synthetic as mod
    elif kind == "hf":
        from . import hf as mod
    elif kind == "gguf":
        from . import gguf as mod
    else:
        raise ValueError(f"unknown source kind {kind!r}")
    return mod


def describe(ref: SourceRef) -> SourceInfo:
    return _module(ref.kind).describe(ref)


def open_weights(ref: SourceRef, info: SourceInfo) -> WeightStore:
    return _module(ref.kind).open_weights(ref, info)
