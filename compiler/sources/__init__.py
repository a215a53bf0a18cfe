"""Checkpoint sources: what a checkpoint is (metadata only) and its weights (lazily).

Each kind lives in its own module and provides `describe(ref) -> SourceInfo`
(cheap: metadata only, used by lowering, `inspect` and `plan`) and
`open_weights(ref, info) -> WeightStore` (canonical names and conventions, see
`mtpc.weights`).
"""

from __future__ import annotations

from ..ir import SourceRef
from ..weights import WeightStore
from .info import SourceInfo


def _module(kind: str):
    if kind == "synthetic":
        from . import synthetic as mod
    elif kind == "hf":
        from .hf import reader as mod
    elif kind == "gguf":
        from .gguf import reader as mod
    else:
        raise ValueError(f"unknown source kind {kind!r}")
    return mod


def describe(ref: SourceRef) -> SourceInfo:
    return _module(ref.kind).describe(ref)


def open_weights(ref: SourceRef, info: SourceInfo) -> WeightStore:
    return _module(ref.kind).open_weights(ref, info)
