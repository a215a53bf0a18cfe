"""What a checkpoint is, as every source kind describes it (metadata only): `SourceInfo`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from ..ir import Architecture, SourceTensor


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
    # Checks that read tensor data (a GGUF head file's copies of its target's tensors): compile runs them while
    # lowering, with the tokenizer files; the metadata verbs read headers only. Raises a SourceError.
    weight_checks: Callable[[], None] | None = field(default=None, compare=False, repr=False)

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
