"""Where each canonical weight lives in a GGUF file and what llama.cpp's converter did to it.

`layout_of` resolves the name table (`names`) against the file's metadata into a `Layout`: every
served canonical tensor's GGUF tensor and transform, with presence and shapes checked up front, and
the MTP head judged once. The reader (`reader`, metadata into the IR) and the weight store (`store`,
bytes on demand) both build on it; neither imports the other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ...util.diagnostics import SourceError
from ...ir import Architecture, LayerKind, QuantForm, SourceTensor
from ..mtp_head import head_verdict
from .constants import GGMLQuantizationType as QT, Keys
from .header import GGUFHeader, TensorInfo as GGUFTensorInfo
from . import deepseek2, glm4moe, qwen3next, step35
from .metadata import Metadata, architecture, tensor_shapes
from .names import QWEN35, QWEN35MOE, GGUFNames, Rule, Transform, attention_rules, ffn_rules, mla_dims, moe_dims
from .quant import GATHER, MATMUL, CarryOver, carry_over

_FLOAT_NAMES = {QT.F32: "float32", QT.F16: "float16", QT.BF16: "bfloat16"}
# Every GGUF architecture mtpc reads, by `general.architecture`: Qwen3.5's tables (`names`) and each family's own.
ARCHITECTURES: dict[str, GGUFNames] = {n.family: n for n in (QWEN35, QWEN35MOE, glm4moe.NAMES, qwen3next.NAMES,
                                                              deepseek2.NAMES, step35.NAMES)}
# A family whose metadata keys are not Qwen3.5's reads them itself (`metadata.architecture` otherwise).
_ARCHITECTURE_READERS = {"glm4moe": glm4moe.architecture, "deepseek2": deepseek2.architecture,
                         "step35": step35.architecture}


# ----------------------------------------------------------------------------- reading the file


# The last header parsed, by the file's identity: `describe` (lowering) and the weight store both need
# it, and walking a 248k-token vocabulary twice is a quarter of a second on a 27B file. A file
# replaced or rewritten in between has another identity (inode, size, mtime) and is parsed afresh.
_last_header: tuple[tuple, GGUFHeader] | None = None


def open_header(path: str) -> GGUFHeader:
    global _last_header
    if not os.path.isfile(path):
        raise SourceError(f"{path}: no such GGUF file")
    st = os.stat(path)
    identity = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if _last_header is not None and _last_header[0] == identity:
        return _last_header[1]
    header = GGUFHeader(path)
    _last_header = (identity, header)
    return header


# ----------------------------------------------------------------------------- metadata -> IR


@dataclass(frozen=True)
class Entry:
    """One canonical tensor: where it is stored and how to turn it back."""

    canonical: str
    gguf: str
    gguf_shape: tuple[int, ...]
    canonical_shape: tuple[int, ...]
    transform: Transform
    # Further GGUF tensors the canonical tensor is assembled from (`Rule.parts`).
    parts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Layout:
    arch: Architecture
    names: GGUFNames
    n_main: int
    entries: dict[str, Entry]
    # value-head regrouping parameters: (n_key_heads, n_value_heads, key_dim); n_value_heads is n_key_heads
    # when the file keeps them grouped (nothing to regroup)
    heads: tuple[int, int, int]
    # What the user should know about how the file was read (a fallback taken).
    notes: tuple[str, ...] = ()


def _dims(arch: Architecture) -> dict[str, int]:
    lin = arch.linear_attention
    linear = {} if lin is None else {
        "QKV": lin.conv_dim,
        "VD": lin.value_dim,
        "HV": lin.num_value_heads,
        "HV2": 2 * lin.num_value_heads,
        "DV": lin.value_head_dim,
        "CK": lin.conv_kernel,
    }
    return {
        "H": arch.hidden_size,
        "H2": 2 * arch.hidden_size,
        "I": arch.intermediate_size,
        "V": arch.vocab_size,
        "Q": 2 * arch.num_attention_heads * arch.head_dim,
        "O": arch.num_attention_heads * arch.head_dim,
        "KV": arch.num_key_value_heads * arch.head_dim,
        "HD": arch.head_dim,
        "NH": arch.num_attention_heads,
        **_sliding_dims(arch),
        **linear,
        **moe_dims(arch.moe),
        **mla_dims(arch.mla, arch.num_attention_heads),
    }


def _sliding_dims(arch: Architecture) -> dict[str, int]:
    """A sliding block's own query rows and heads, where it has them."""
    if arch.sliding_attention is None:
        return {}
    heads = arch.sliding_attention.num_attention_heads
    return {"OS": heads * arch.sliding_attention.head_dim, "NHS": heads}


def layout_of(meta: Metadata) -> Layout:
    names = ARCHITECTURES.get(meta.arch)
    if names is None:
        raise SourceError(
            f"{meta.path}: GGUF architecture {meta.arch!r} is not supported (supported: {', '.join(sorted(ARCHITECTURES))})"
        )
    arch, n_main = _ARCHITECTURE_READERS.get(names.family, architecture)(meta, names)
    dims = _dims(arch)
    present = tensor_shapes(meta.header)
    if names.variant is not None:
        names = names.variant(arch, present)
    entries: dict[str, Entry] = {}

    def check(gguf_name: str, shape: tuple[str, ...]) -> tuple[int, ...] | None:
        expected = tuple(dims[d] for d in shape)
        actual = present.get(gguf_name)
        if actual is not None and actual != expected:
            raise SourceError(
                f"{meta.path}: GGUF tensor {gguf_name} has shape {list(actual)}, expected {list(expected)}"
            )
        return actual

    def add(rule: Rule, gguf_prefix: str, canonical_prefix: str, *, optional: bool = False) -> None:
        gguf_name = gguf_prefix + rule.gguf
        expected = check(gguf_name, rule.shape)
        if expected is None and optional:
            return
        for part, shape in ((gguf_name, rule.shape), *((gguf_prefix + p, s) for p, s in rule.parts)):
            if check(part, shape) is None:
                raise SourceError(f"{meta.path}: GGUF tensor {part} is missing (expected shape "
                                  f"{[dims[d] for d in shape]})")
        assert expected is not None
        canonical_shape = (expected[0], 1, expected[1]) if rule.transform is Transform.CONV1D else expected
        if rule.transform in (Transform.BETA_ROWS, Transform.ALPHA_ROWS):
            canonical_shape = (expected[0] // 2, *expected[1:])
        if rule.transform is Transform.KV_B_SPLIT:
            canonical_shape = (dims["KVB"], dims["R"])
        name = canonical_prefix + rule.canonical
        entries[name] = Entry(name, gguf_name, expected, canonical_shape, rule.transform,
                              tuple(gguf_prefix + p for p, _ in rule.parts))

    for rule in names.global_required:
        add(rule, "", "")
    add(names.output, "", "", optional=True)

    def block(index: int, kind: LayerKind, canonical_prefix: str) -> None:
        prefix = f"blk.{index}."
        for rule in block_rules(names, arch, kind, index if index < n_main else None):
            add(rule, prefix, canonical_prefix)

    for i, kind in enumerate(arch.layer_kinds):
        block(i, kind, f"layers.{i}.")
    arch, notes = _head(meta, names, arch, n_main, present, add, block)
    lin = arch.linear_attention
    # Value-head regrouping is Qwen3.5's linear attention only; a model without it regroups nothing.
    heads = (1, 1, 0) if lin is None else (lin.num_key_heads, lin.num_value_heads, lin.key_dim)
    if lin is not None and not names.tiled_value_heads:
        heads = (lin.num_key_heads, lin.num_key_heads, lin.key_dim)  # grouped already: regroup nothing
    return Layout(arch, names, n_main, entries, heads, tuple(notes))


def block_rules(names: GGUFNames, arch: Architecture, kind: LayerKind, block: int | None) -> tuple[Rule, ...]:
    """The tensors of one block (`block` None: the MTP block): norms, FFN and mixer."""
    mixer = (names.linear_attention if kind is LayerKind.LINEAR_ATTENTION
             else attention_rules(names, arch, sliding=kind is LayerKind.SLIDING_ATTENTION))
    return names.every_block + ffn_rules(names, arch, block) + mixer


def _head(meta: Metadata, names: GGUFNames, arch: Architecture, n_main: int, present, add, block):
    """Judge the head block (`mtp_head`), add its entries if it can be built; (arch, notes)."""
    prefix = f"blk.{n_main}."
    kinds = block_rules(names, arch, arch.mtp_layer_kind, None)
    expected = {prefix + r.gguf for r in kinds + names.nextn_required}
    expected |= {prefix + p for r in kinds for p, _ in r.parts}
    own = names.nextn_optional + tuple(r for r, _ in names.nextn_fallback)
    known = expected | {prefix + r.gguf for r in own}
    # The later MTP blocks a checkpoint chains (Step-3.5's): known, served as `mtp.heads.{k}.*`, unused.
    chained = range(1, arch.mtp_chained_layers) if arch.mtp_num_layers else range(0)
    known |= {f"blk.{n_main + k}.{name}" for k in chained for name in (*(n.removeprefix(prefix) for n in expected),
                                                                         *(r.gguf for r in own))}
    head_like = {n for n in present if _is_head_tensor(n, n_main)}
    usable, unusable = head_verdict(
        declared=arch.mtp_num_layers,
        declared_key=Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch=meta.arch),
        expected=expected,
        present=head_like & known,
        unknown=head_like - known,
        block=prefix[:-1],
    )
    arch = replace(arch, mtp_num_layers=usable, unusable_head=unusable)
    notes: list[str] = []
    if not usable:
        return arch, notes
    block(n_main, arch.mtp_layer_kind, "mtp.layers.0.")
    for rule in names.nextn_required:
        add(rule, prefix, "")
    for rule in names.nextn_optional:
        add(rule, prefix, "", optional=True)
    for k in chained:
        block(n_main + k, arch.mtp_layer_kind, f"mtp.heads.{k}.layers.0.")
        for rule in names.nextn_required + names.nextn_optional + tuple(r for r, _ in names.nextn_fallback):
            add(replace(rule, canonical=rule.canonical.replace("mtp.", f"mtp.heads.{k}.", 1)), f"blk.{n_main + k}.", "",
                optional=rule not in names.nextn_required)
    for rule, stand_in in names.nextn_fallback:
        if prefix + rule.gguf in present:
            add(rule, prefix, "")
        else:
            add(replace(rule, gguf=stand_in), "", "")
            notes.append(f"the GGUF has no {prefix}{rule.gguf}: the MTP head uses {stand_in} in its place")
    return arch, notes


def _is_head_tensor(gguf_name: str, n_main: int) -> bool:
    """A tensor of an MTP block: in a block past the trunk, or named like a head tensor anywhere."""
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit() and int(parts[1]) >= n_main:
        return True
    return parts[0] == "mtp" or "nextn" in parts


def served_names(layout: Layout) -> list[str]:
    return sorted(set(layout.entries) | {"lm_head.weight"})  # tied sources serve the embedding


def entry_of(layout: Layout, name: str, path: str) -> Entry:
    entry = layout.entries.get(name)
    if entry is None and name == "lm_head.weight":
        entry = layout.entries["embed_tokens.weight"]
    if entry is None:
        raise KeyError(f"{path}: no tensor {name!r}")
    return entry


def op_for(canonical: str) -> str:
    """Which onnxruntime op reads the weight: the embedding is gathered, every other one multiplied."""
    return GATHER if canonical.endswith("embed_tokens.weight") else MATMUL


def source_tensor(layout: Layout, tensors: dict[str, GGUFTensorInfo], name: str) -> SourceTensor:
    entry = entry_of(layout, name, "")
    qtype = tensors[entry.gguf].type
    # A tensor assembled from parts is as quantized as its most quantized part (it is dequantized on read).
    qtype = next((t for t in (tensors[p].type for p in (entry.gguf, *entry.parts)) if t not in _FLOAT_NAMES), qtype)
    encoding = _FLOAT_NAMES.get(qtype, qtype.name)
    form = carried_form(layout, entry, qtype, op_for(name))
    carried = None
    if form is not None:
        carried = QuantForm(form.bits, form.block_size, form.has_zero_points, form.zero_points == "float", form.block_offsets)
    exact = qtype in _FLOAT_NAMES or carry_over(qtype, op_for(name)) is not None
    return SourceTensor(name, entry.canonical_shape, encoding, carried, has_exact_form=exact)


def carried_form(layout: Layout, entry: Entry, qtype: QT, op: str) -> CarryOver | None:
    """The exact block form `read` hands the tensor out in, or None when it reads as float (dequantized)."""
    form = carry_over(qtype, op)
    if form is not None and len(entry.gguf_shape) == 3 and ".mlp.experts." in f".{entry.canonical}":
        # A MoE layer's expert stack, read as rows [E * N, K]: QMoE takes blocks with the default zero point only.
        return form if not form.has_zero_points and not form.block_offsets else None
    if form is None or len(entry.gguf_shape) != 2:
        return None
    if entry.transform is Transform.VALUE_COLUMNS:
        # Regrouping columns moves whole blocks only if a value head spans whole blocks.
        lin, (n_k, n_v, _) = layout.arch.linear_attention, layout.heads
        whole = lin is not None and (n_v == n_k or lin.value_head_dim % form.block_size == 0)
        return form if whole else None
    rows = (Transform.NONE, Transform.VALUE_ROWS, Transform.VALUE_ROWS_AFTER_KEYS, Transform.BETA_ROWS, Transform.ALPHA_ROWS,
            Transform.ROPE_ROWS_PER_HEAD, Transform.ROPE_ROWS_LAST)
    return form if entry.transform in rows else None


