"""A model's MTP head in a GGUF file of its own, read with its target as the one-file conversion.

llama.cpp's converter publishes a model as two files when run twice (convert_hf_to_gguf.py `--no-mtp`, `--mtp`;
llama-cpp-python 0.3.36's vendored llama.cpp): `--no-mtp` writes the target, the trunk alone (no
`nextn_predict_layers`, `block_count` the trunk's); `--mtp` writes `mtp-<name>.gguf`, the metadata of the
one-file conversion (`block_count` counting the head's blocks, `nextn_predict_layers`), the head's blocks
numbered after the trunk, and copies of the tensors the head shares with the trunk, `token_embd`, `output_norm`
and `output` when untied (conversion/qwen.py `_QwenMtpMixin.filter_tensors`, conversion/glm.py and
conversion/deepseek.py alike), so that llama.cpp can load it alone: its loaders take a file declaring head
blocks without `blk.0.attn_norm.weight` as `mtp_only` and skip the trunk (src/models/qwen35.cpp and every
MTP family's `load_arch_tensors`).

`paired` reads the two as that one-file conversion: the target's tensors and the head file's blocks, the target's
metadata with the head file's block count, nextn count and per-block arrays. It first holds the head file to
the target, from the headers (`mismatch`): a head-only file, of the target's architecture keys, its head block
right after the target's trunk, its shared tensors of the target's shapes. Their values are compared when
weights are read (`check_shared_values`, which compile runs): byte for byte where both files store a tensor
in the same type, else by correlation, the two types named in a note. The head reads the target's copies, so
the package is the one-file conversion's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...util.diagnostics import SourceError
from .constants import Keys
from .header import GGUFHeader, LazyStrings, TensorInfo
from .layout import open_header

BLOCK_COUNT = Keys.LLM.BLOCK_COUNT
NEXTN = Keys.LLM.NEXTN_PREDICT_LAYERS
# What llama.cpp's loaders probe to tell a head-only file (src/models/*.cpp: `mtp_only`).
TRUNK_PROBE = "blk.0.attn_norm.weight"


def block_of(name: str) -> int | None:
    """The block index of a `blk.N.*` tensor, None for a tensor outside the blocks."""
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit() else None


@dataclass(frozen=True)
class HeadFileFacts:
    """What a GGUF header says about its MTP head, read from the header alone."""

    arch: str
    block_count: int
    nextn: int
    head_only: bool  # declares head blocks and holds no trunk block (llama.cpp's `mtp_only`)

    @property
    def trunk(self) -> int:
        return self.block_count - self.nextn


def facts_of(header: GGUFHeader) -> HeadFileFacts | None:
    """The header's architecture, block count and nextn count; None when the header lacks them (it is then read
    by the layout, which names what is missing)."""
    arch = header.metadata.get("general.architecture")
    if not isinstance(arch, str):
        return None
    blocks, nextn = header.metadata.get(BLOCK_COUNT.format(arch=arch)), header.metadata.get(NEXTN.format(arch=arch), 0)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (blocks, nextn)):
        return None
    trunk = blocks - nextn
    holds_trunk = any((b := block_of(n)) is not None and b < trunk for n in header.tensors)
    return HeadFileFacts(arch, blocks, nextn, head_only=nextn > 0 and 0 < trunk and not holds_trunk)


def head_only_refusal(path: str, header: GGUFHeader) -> SourceError | None:
    """A head-only file named as the model itself: say what it is and how to compile it."""
    facts = facts_of(header)
    if facts is None or not facts.head_only:
        return None
    return SourceError(
        f"{path}: a GGUF holding only an MTP head (llama.cpp's `--mtp` output: blk.{facts.trunk} and copies of the "
        f"tensors it shares with a {facts.trunk}-block trunk), not a model: name its target as `gguf:` and this "
        "file as `head:`"
    )


# ----------------------------------------------------------------------------- the two files as one


class PairedHeader:
    """A target's header and its head file's, read as one file's (`GGUFHeader`'s reading interface)."""

    def __init__(self, target: GGUFHeader, head: GGUFHeader, metadata: dict, types: dict, tensors: dict,
                 owners: dict[str, GGUFHeader]):
        self.target, self.head = target, head
        self.path, self.file_size = target.path, target.file_size  # the target's: the file the facts describe
        self.metadata, self.types, self.tensors = metadata, types, tensors
        self._owners = owners

    def data(self, info: TensorInfo):
        return self._owners[info.name].data(info)

    def release(self, info: TensorInfo) -> None:
        self._owners[info.name].release(info)

    def shared(self) -> list[tuple[TensorInfo, TensorInfo]]:
        """The head file's copies of the target's tensors, each beside the target's: (target's, head file's)."""
        return [(self.target.tensors[n], t) for n, t in sorted(self.head.tensors.items()) if block_of(n) is None]


def label(target: str, head: str | None) -> str:
    """How messages name a source read from one file or two."""
    return target if head is None else f"{target} (with its MTP head file {os.path.basename(head)})"


_last_pair: tuple[GGUFHeader, GGUFHeader, PairedHeader] | None = None


def open_source(target: str, head: str | None) -> "GGUFHeader | PairedHeader":
    """The header compile reads: the target's, or the target's and its head file's as one."""
    global _last_pair
    target_header = open_header(target)
    if head is None:
        refusal = head_only_refusal(target, target_header)
        if refusal is not None:
            raise refusal
        return target_header
    head_header = open_header(head)
    last = _last_pair
    if last is not None and last[0] is target_header and last[1] is head_header:
        return last[2]
    pair = paired(target_header, head_header)
    _last_pair = (target_header, head_header, pair)
    return pair


def paired(target: GGUFHeader, head: GGUFHeader) -> PairedHeader:
    refusal = mismatch(target, head)
    if refusal is not None:
        raise SourceError(f"{head.path} is not the MTP head of {target.path}: {refusal}")
    facts = facts_of(head)
    assert facts is not None
    metadata, types = dict(target.metadata), dict(target.types)
    for key in _head_keys(target, head, facts):
        metadata[key], types[key] = head.metadata[key], head.types[key]
    tensors = dict(target.tensors)
    owners = dict.fromkeys(target.tensors, target)
    for name, info in head.tensors.items():
        if block_of(name) is not None:
            tensors[name], owners[name] = info, head
    return PairedHeader(target, head, metadata, types, tensors, owners)


def _head_keys(target: GGUFHeader, head: GGUFHeader, facts: HeadFileFacts) -> list[str]:
    """The keys the head file's value stands for the pair: the block and nextn counts, and every per-block array
    (its entries for the head's blocks after the target's for the trunk, which `mismatch` held equal)."""
    count, nextn = BLOCK_COUNT.format(arch=facts.arch), NEXTN.format(arch=facts.arch)
    return [count, nextn] + [k for k, v in head.metadata.items() if k not in (count, nextn)
                             and _per_block(v, facts.block_count) and target.metadata.get(k) != v]


def _per_block(value, blocks: int) -> bool:
    return isinstance(value, list) and len(value) == blocks


def mismatch(target: GGUFHeader, head: GGUFHeader) -> str | None:
    """Why `head` cannot be `target`'s head file, from the two headers; None when it can."""
    facts, own = facts_of(head), facts_of(target)
    if facts is None or own is None:
        return "its header does not state its architecture, block count and MTP layers (general.architecture, " \
               "<arch>.block_count, <arch>.nextn_predict_layers)"
    if facts.arch != own.arch:
        return f"it is a {facts.arch!r} model, the target a {own.arch!r} one"
    if facts.nextn == 0:
        return f"it holds no MTP head ({NEXTN.format(arch=facts.arch)} is absent or 0)"
    if not facts.head_only:
        return f"it holds a whole model, not only an MTP head ({TRUNK_PROBE} and the other trunk blocks are there)"
    if own.nextn:
        return (f"the target holds its own MTP head ({NEXTN.format(arch=own.arch)} is {own.nextn}): compile it "
                "alone, without `head:`")
    if facts.trunk != own.block_count:
        return (f"its head block is blk.{facts.trunk}, after a {facts.trunk}-block trunk, and the target's trunk has "
                f"{own.block_count} blocks ({BLOCK_COUNT.format(arch=own.arch)})")
    if any((b := block_of(n)) is not None and b >= own.block_count for n in target.tensors):
        return f"the target holds tensors of blocks past its trunk of {own.block_count}"
    return _metadata_difference(target, head, facts) or _shape_difference(target, head)


# Keys that describe the file, not the model: its name and size label, the counts of its own header.
_FILE_KEYS = ("general.", "GGUF.")


def _metadata_difference(target: GGUFHeader, head: GGUFHeader, facts: HeadFileFacts) -> str | None:
    """The first model key the two files disagree on (the tokenizer's and the architecture's): each must be the same,
    but the head's block and nextn counts and its per-block arrays, whose trunk entries must be the target's."""
    count, nextn = BLOCK_COUNT.format(arch=facts.arch), NEXTN.format(arch=facts.arch)
    for key in sorted(set(target.metadata) | set(head.metadata)):
        if key.startswith(_FILE_KEYS) or key in (count, nextn):
            continue
        mine, theirs = target.metadata.get(key), head.metadata.get(key)
        if _per_block(theirs, facts.block_count) and isinstance(mine, list) and len(mine) == facts.trunk:
            theirs = theirs[: facts.trunk]
        if mine is None or theirs is None:
            where = "the target" if mine is None else "the head file"
            return f"{key} is missing from {where}"
        if not _same(mine, theirs):
            return _difference(key, mine, theirs)
    return None


def _difference(key: str, mine, theirs) -> str:
    arrays = all(hasattr(v, "__len__") and not isinstance(v, str) for v in (mine, theirs))
    if arrays and len(mine) == len(theirs) and len(mine) > 8:
        at = next(i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b)
        return f"{key} differs at entry {at}: {theirs[at]!r} there, {mine[at]!r} in the target"
    return f"{key} is {_shown(theirs)} there, {_shown(mine)} in the target"


def _same(a, b) -> bool:
    if isinstance(a, LazyStrings) and isinstance(b, LazyStrings):  # a vocabulary: its bytes, not 248k decoded strings
        return a.encoded() == b.encoded()
    if hasattr(a, "__len__") and not isinstance(a, str):
        return hasattr(b, "__len__") and not isinstance(b, str) and len(a) == len(b) and list(a) == list(b)
    return a == b


def _shown(value) -> str:
    if hasattr(value, "__len__") and not isinstance(value, str):
        return f"an array of {len(value)}" if len(value) > 8 else str(list(value))
    return repr(value)


def _shape_difference(target: GGUFHeader, head: GGUFHeader) -> str | None:
    """The head file's copies of trunk tensors: each the target's shape; the LM head in both files or in neither."""
    for name, info in sorted(head.tensors.items()):
        if block_of(name) is not None:
            continue
        own = target.tensors.get(name)
        if own is None:
            return f"it holds {name}, which the target does not"
        if own.shape != info.shape:
            return f"its {name} has shape {list(info.shape)}, the target's {list(own.shape)}"
    untied = [n for n in ("output.weight",) if (n in head.tensors) != (n in target.tensors)]
    if untied:
        where = "the head file" if untied[0] in head.tensors else "the target"
        return f"only {where} holds output.weight (the other ties its LM head to the embedding)"
    return None


# ----------------------------------------------------------------------------- values, when weights are read


# Rows compared of a shared matrix stored in two types: spread evenly, enough to tell two models apart.
SAMPLED_ROWS = 256
# Two roundings of one tensor correlate far above this (measured with gguf-py's quantize on 256 x 256 Gaussian
# weights: Q8_0 0.99999, Q4_0 0.996, MXFP4 0.993, ternary TQ1_0 0.70 on weights that are not ternary), two
# models' tensors near 0 (independent Gaussian ones: -0.003).
SAME_TENSOR_CORRELATION = 0.5
_CHUNK_BYTES = 64 << 20


def stored_differently(pair: PairedHeader) -> list[str]:
    """The shared tensors the two files store in different types, named with both types (header only)."""
    return [f"{own.name} is {own.type.name} in the target, {copy.type.name} in the head file"
            for own, copy in pair.shared() if own.type != copy.type]


def check_shared_values(pair: PairedHeader) -> None:
    """Refuse a head file whose copies of the shared tensors hold other values than the target's: byte for byte
    where both store a tensor alike, else a correlation of the dequantized values (sampled rows) of at least
    SAME_TENSOR_CORRELATION. Reads those tensors (compile; the metadata verbs read headers only)."""
    for own, copy in pair.shared():
        same = _same_bytes(pair, own, copy) if own.type == copy.type else _correlated(pair, own, copy)
        if same is not True:
            detail = "" if same is False else f" (correlation {same:.3f} of their values, {own.type.name} and {copy.type.name})"
            raise SourceError(
                f"{pair.head.path} is not the MTP head of {pair.target.path}: its {own.name} holds other values than "
                f"the target's{detail}, so it belongs to another model"
            )


def _rows(pair: PairedHeader, info: TensorInfo):
    data = pair.target.data(info) if pair.target.tensors.get(info.name) is info else pair.head.data(info)
    return data.reshape(data.shape[0] if data.ndim > 1 else 1, -1)


def _same_bytes(pair: PairedHeader, own: TensorInfo, copy: TensorInfo) -> bool:
    import numpy as np

    a, b = _rows(pair, own), _rows(pair, copy)
    step = max(1, _CHUNK_BYTES // max(1, a.nbytes // len(a)))
    try:
        return all(np.array_equal(a[i : i + step], b[i : i + step]) for i in range(0, len(a), step))
    finally:
        pair.target.release(own)
        pair.head.release(copy)


def _correlated(pair: PairedHeader, own: TensorInfo, copy: TensorInfo) -> bool | float:
    import numpy as np
    from gguf.quants import dequantize

    a, b = _rows(pair, own), _rows(pair, copy)
    rows = np.unique(np.linspace(0, len(a) - 1, min(len(a), SAMPLED_ROWS)).astype(np.int64))
    try:
        x, y = (dequantize(np.ascontiguousarray(m[rows]), t.type).astype(np.float64).ravel()
                for m, t in ((a, own), (b, copy)))
    except NotImplementedError:  # a type gguf-py cannot dequantize: the shapes are all there is to compare
        return True
    dx, dy = x - x.mean(), y - y.mean()
    scale = float(np.sqrt((dx * dx).sum() * (dy * dy).sum()))
    if scale == 0.0:  # a constant tensor (a norm of ones) has no correlation: its values are compared
        return bool(np.allclose(x, y, rtol=1e-2, atol=0))
    correlation = float((dx * dy).sum() / scale)
    return True if correlation >= SAME_TENSOR_CORRELATION else correlation
