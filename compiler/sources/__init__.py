"""Checkpoint sources: what a checkpoint is (metadata only) and its weights (lazily).

Each kind lives in its own module and provides `describe(ref) -> SourceInfo`
(cheap: metadata only, used by lowering, `inspect` and `plan`) and
`open_weights(ref, info) -> WeightStore` (canonical names and conventions, see
`mtpc.weights`). A checkpoint on the Hugging Face Hub (`ref.hub`) is read through `hub/`: described from
its small files and headers, its weights downloaded by `fetch` (compile) before they are opened.
"""

from __future__ import annotations

from typing import Callable

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
    if ref.hub is not None:
        from .hub import checkpoints

        return checkpoints.describe(ref)
    return _module(ref.kind).describe(ref)


def fetch(ref: SourceRef, info: SourceInfo, progress: Callable[[str], None] = lambda message: None) -> None:
    """Make local what `open_weights` reads: a hub source's files are downloaded into the cache (a folder's
    and a file's are local already)."""
    if ref.hub is not None:
        from .hub import checkpoints

        checkpoints.fetch(ref, info, progress)


def open_weights(ref: SourceRef, info: SourceInfo) -> WeightStore:
    if ref.hub is not None:
        from .hub import checkpoints

        return checkpoints.open_weights(ref, info)
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
