"""Checkpoint sources: what a checkpoint is (metadata only) and its weights (lazily).

Each kind lives in its own module and provides `describe(ref) -> SourceInfo`
(cheap: metadata only, used by lowering, `inspect` and `plan`) and
`open_weights(ref, info) -> WeightStore` (canonical names and conventions, see
`mtpc.weights`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Architecture, SourceRef
from ..weights import WeightStore


@dataclass(frozen=True)
class SourceInfo:
    architecture: Architecture
    # Tensor groups and their storage types, for `inspect` (e.g. {"attn_q": "Q4_0"}).
    storage: tuple[tuple[str, str], ...] = ()
    # Tokenizer files the source can provide: relpath -> bytes.
    tokenizer_files: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    # Free-form facts for `inspect` (format version, file size, ...).
    facts: tuple[tuple[str, object], ...] = ()

    @property
    def has_mtp_head(self) -> bool:
        return self.architecture.mtp_num_layers > 0


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
