"""GGUF checkpoints (llama.cpp): metadata -> Architecture, tensors -> canonical weights.

The file is memory-mapped and its header walked by `header` (gguf-py's own
reader takes seconds on a real vocabulary); tensor data is only touched when a
weight is read, and dequantized with gguf-py's `gguf.quants`. Where each tensor lives and what the converter did to it
is data in `names`; `layout` resolves that table against the metadata and
checks every tensor's presence and shape up front; the store undoes the transforms on
read. Block-quantized weights of every type with an exact MatMulNBits /
GatherBlockQuantized form (`quant.carry_over`: Q4_0 ... Q8_0, the k-quants, ...)
are handed out as `QuantizedTensor`s in that form; other types are dequantized so the
plan can store them as float or re-quantize them. The weight store that reads them is
`store`; this module reads the header into the IR.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ...ir import SourceRef
from ..card_facts import gguf_card_facts
from ..info import SourceInfo
from .constants import Keys
from .header import GGUFHeader
from .layout import layout_of, open_header, served_names, source_tensor
from .metadata import Metadata
from .tokenizer import tokenizer_files

if TYPE_CHECKING:
    from .store import GGUFWeightStore


def _storage(header: GGUFHeader) -> tuple[tuple[str, str], ...]:
    groups: dict[str, set[str]] = defaultdict(set)
    for t in header.tensors.values():
        parts = t.name.split(".")
        if parts[0] == "blk":
            parts = parts[2:]
        if parts[-1] == "weight":
            parts = parts[:-1]
        groups[".".join(parts)].add(t.type.name)
    return tuple((group, ",".join(sorted(types))) for group, types in sorted(groups.items()))


# The last description made, by the reference and the header it was read from (which stands for the
# file's identity, `open_header`): `diff SPEC SPEC` lowers two specs of one checkpoint, and a description is
# a function of the two (frozen; its tokenizer files, built on first read, are the file's).
_last_description: tuple[SourceRef, GGUFHeader, SourceInfo] | None = None


def describe(ref: SourceRef) -> SourceInfo:
    """Metadata only: tensor shapes and types come from the header, no tensor data is read."""
    global _last_description
    assert ref.path is not None
    header = open_header(ref.path)
    last = _last_description
    if last is not None and last[0] == ref and last[1] is header:
        return last[2]
    info = _describe(ref, header)
    _last_description = (ref, header, info)
    return info


def describe_header(ref: SourceRef, header: GGUFHeader) -> SourceInfo:
    """`describe` of a header read elsewhere (a hub file's first bytes, `sources/hub/`); `ref.path` names it."""
    return _describe(ref, header)


def _describe(ref: SourceRef, header: GGUFHeader) -> SourceInfo:
    assert ref.path is not None
    meta = Metadata(header, ref.path)
    layout = layout_of(meta)
    header = meta.header
    facts: list[tuple[str, object]] = [
        ("format", f"GGUF v{int(meta.get('GGUF.version'))}"),
        ("file_size", header.file_size),
        ("gguf_architecture", meta.arch),
        ("tensor_count", len(header.tensors)),
        ("trunk_layers", layout.n_main),
    ]
    if layout.arch.mtp_num_layers:
        facts.append(("mtp_block", f"blk.{layout.n_main}"))
        shared = [r.canonical for r in layout.names.nextn_optional if r.canonical not in layout.entries]
        if shared:
            facts.append(("mtp_shares", tuple(shared)))
    if layout.arch.unusable_head is not None:
        facts.append(("mtp_note", layout.arch.unusable_head.reason))
    model = meta.get(Keys.Tokenizer.MODEL, "", required=False)
    if model:
        facts.append(("tokenizer_model", model))
    return SourceInfo(
        architecture=layout.arch,
        storage=_storage(header),
        tokenizer=tokenizer_files(meta.get, layout.arch, ref.path),
        facts=tuple(facts),
        notes=layout.notes,
        tensors=tuple(source_tensor(layout, header.tensors, n) for n in served_names(layout)),
        card=gguf_card_facts(header.metadata),
    )


def open_weights(ref: SourceRef, info: SourceInfo) -> "GGUFWeightStore":
    from .store import GGUFWeightStore  # it builds on this module's layout

    assert ref.path is not None
    return GGUFWeightStore(ref.path)
