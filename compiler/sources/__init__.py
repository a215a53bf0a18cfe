"""Checkpoint sources: what a checkpoint is (metadata only) and its weights (lazily).

Each kind lives in its own module and provides `describe(ref) -> SourceInfo`
(cheap: metadata only, used by lowering, `inspect` and `plan`) and
`open_weights(ref, info) -> WeightStore` (canonical names and conventions, see
`mtpc.weights`).
"""

from __future__ import annotations

from ..ir import ModelIR, SourceRef
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


def open_model_weights(ir: ModelIR, info: SourceInfo) -> WeightStore:
    """The source's weights as the package reads them: with the head's own LM head
    (`mtp.lm_head.weight`, `weights.draft`) when the IR gives it one."""
    store = open_weights(ir.source, info)
    if not (ir.mtp.emit_head and ir.mtp.own_lm_head):
        return store
    from ..weights.draft import WithOwnLmHead

    vocabulary = ir.mtp.draft_vocabulary
    return WithOwnLmHead(store, None if vocabulary is None else vocabulary.ids,
                         from_head=ir.architecture.mtp_own_lm_head)
