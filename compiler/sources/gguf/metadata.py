"""GGUF metadata -> Architecture: the keys llama.cpp's converter writes for Qwen3.5.

Sizes come from `<arch>.*` keys; the layer layout from `layer_layout` (the
converter's `recurrent_layers` first); the vocabulary size from the embedding's
shape. Nothing here reads tensor data.
"""

from __future__ import annotations

import math
import struct
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

from .constants import GGMLQuantizationType, Keys

from ...util.diagnostics import SourceError
from ...ir import Architecture, LayerKind, LinearAttentionDims, MoeDims, Rope, TokenIds
from .header import GGUFHeader
from .names import GGUFNames
from ..layer_layout import CONVERTER_PLACEHOLDER_INTERVAL, Declared, layer_kinds


_INTS = frozenset((0, 1, 2, 3, 4, 5, 10, 11))  # GGUF value types: u8 i8 u16 i16 u32 i32 u64 i64
_FLOATS = frozenset((6, 12))  # f32 f64
_BOOL, _STRING, _ARRAY = 7, 8, 9

# What each key mtpc reads must hold. A key of another type is a SourceError naming the key and
# this expectation, not a ValueError deep in lowering. ("count": a non-negative integer.)
_EXPECTED = {
    "general.architecture": "string",
    "GGUF.version": "count",
    Keys.LLM.BLOCK_COUNT: "count",
    Keys.LLM.NEXTN_PREDICT_LAYERS: "count",
    Keys.LLM.EMBEDDING_LENGTH: "count",
    Keys.LLM.CONTEXT_LENGTH: "count",
    Keys.LLM.FEED_FORWARD_LENGTH: "count or array of counts",
    Keys.LLM.EXPERT_COUNT: "count",
    Keys.LLM.EXPERT_USED_COUNT: "count",
    Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: "count",
    Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH: "count",
    Keys.LLM.EXPERT_WEIGHTS_NORM: "boolean",
    Keys.LLM.EXPERT_WEIGHTS_SCALE: "number",
    Keys.LLM.EXPERT_GROUP_COUNT: "count",
    Keys.LLM.EXPERT_GROUP_USED_COUNT: "count",
    Keys.LLM.EXPERT_SHARED_COUNT: "count",
    Keys.LLM.EXPERT_GATING_FUNC: "count",
    Keys.LLM.LEADING_DENSE_BLOCK_COUNT: "count",
    Keys.Tokenizer.EOM_ID: "count",
    Keys.Attention.HEAD_COUNT: "count or array of counts",
    Keys.Attention.HEAD_COUNT_KV: "count or array of counts",
    Keys.Attention.KEY_LENGTH: "count",
    Keys.Attention.VALUE_LENGTH: "count",
    Keys.Attention.KEY_LENGTH_MLA: "count",
    Keys.Attention.VALUE_LENGTH_MLA: "count",
    Keys.Attention.KV_LORA_RANK: "count",
    Keys.Attention.Q_LORA_RANK: "count",
    Keys.Rope.SCALING_TYPE: "string",
    Keys.Attention.LAYERNORM_RMS_EPS: "number",
    Keys.Rope.DIMENSION_COUNT: "count",
    Keys.Rope.DIMENSION_SECTIONS: "array of counts",
    Keys.Rope.FREQ_BASE: "number",
    Keys.SSM.GROUP_COUNT: "count",
    Keys.SSM.TIME_STEP_RANK: "count",
    Keys.SSM.INNER_SIZE: "count",
    Keys.SSM.STATE_SIZE: "count",
    Keys.SSM.CONV_KERNEL: "count",
    Keys.Tokenizer.BOS_ID: "count",
    Keys.Tokenizer.EOS_ID: "count",
    Keys.Tokenizer.EOT_ID: "count",
    Keys.Tokenizer.PAD_ID: "count",
    Keys.Tokenizer.HF_JSON: "string",
    Keys.Tokenizer.MODEL: "string",
    Keys.Tokenizer.PRE: "string",
    Keys.Tokenizer.CHAT_TEMPLATE: "string",
    Keys.Tokenizer.LIST: "array of strings",
    Keys.Tokenizer.MERGES: "array of strings",
    Keys.Tokenizer.TOKEN_TYPE: "array of integers",
    Keys.Tokenizer.ADD_BOS: "boolean",
    Keys.Tokenizer.ADD_EOS: "boolean",
}


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _holds(expected: str, kind: int, element: int | None, value: object) -> bool:
    if expected == "string":
        return kind == _STRING
    if expected == "number":
        return kind in _INTS or kind in _FLOATS
    if expected == "boolean":
        return kind == _BOOL or (kind in _INTS and value in (0, 1))
    if expected == "count":
        return kind in _INTS and _is_count(value)
    if expected == "array of strings":
        return kind == _ARRAY and element == _STRING
    if expected == "array of integers":
        return kind == _ARRAY and element in _INTS
    if expected == "array of counts":
        return kind == _ARRAY and element in _INTS and all(_is_count(v) for v in value)  # type: ignore[union-attr]
    if expected == "count or array of counts":
        return _holds("count", kind, element, value) or _holds("array of counts", kind, element, value)
    raise AssertionError(expected)


_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32", 7: "bool",
               8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}  # fmt: skip


def _article(text: str) -> str:
    return ("an " if text[0] in "aeiou" else "a ") + text


class Metadata:
    def __init__(self, header: GGUFHeader, path: str):
        self.header = header
        self.path = path
        self.arch = self.get("general.architecture")

    def get(self, key: str, default=None, *, required: bool = True):
        """The value of `key` (`{arch}` filled in), checked against the type mtpc expects of it."""
        name = key.format(arch=getattr(self, "arch", ""))
        value = self.header.metadata.get(name)
        if value is None:
            if required and default is None:
                raise SourceError(f"{self.path}: GGUF metadata key {name!r} is missing")
            return default
        expected = _EXPECTED.get(key)
        kind, element = self.header.types.get(name, (None, None))
        if expected is not None and kind is not None and not _holds(expected, kind, element, value):
            found = f"a {_TYPE_NAMES.get(kind, str(kind))}"
            if kind == _ARRAY:
                found = f"an array of {_TYPE_NAMES.get(element, str(element))}"  # type: ignore[arg-type]
            elif kind != _STRING:
                found = f"{found} ({value!r})"
            wanted = expected.replace("counts", "non-negative integers").replace("count", "non-negative integer")
            raise SourceError(f"{self.path}: GGUF metadata key {name!r} must be {_article(wanted)}, not {found}")
        return value

    def positive(self, key: str) -> int:
        """A size something is divided by: zero is refused here, naming the key."""
        value = int(self.get(key))
        if value <= 0:
            raise SourceError(f"{self.path}: GGUF metadata key {key.format(arch=self.arch)!r} must be positive, not {value}")
        return value

    def uniform(self, key: str) -> int:
        """A size that may be written per layer; we support only one value across layers."""
        value = self.get(key)
        if isinstance(value, list):
            distinct = sorted({int(v) for v in value if int(v) != 0})
            if len(distinct) != 1:
                raise SourceError(
                    f"{self.path}: {key.format(arch=self.arch)} differs per layer ({distinct}), which mtpc does not support"
                )
            return distinct[0]
        return int(value)


def trunk_blocks(meta: Metadata) -> tuple[int, int, int]:
    """(block_count, nextn_predict_layers, trunk blocks), checked against each other and the file."""
    header = meta.header
    block_count = int(meta.get(Keys.LLM.BLOCK_COUNT))
    nextn = int(meta.get(Keys.LLM.NEXTN_PREDICT_LAYERS, 0, required=False))
    if not 0 <= nextn < block_count:
        raise SourceError(f"{meta.path}: nextn_predict_layers {nextn} does not fit block_count {block_count}")
    if block_count > len(header.tensors):
        raise SourceError(
            f"{meta.path}: {Keys.LLM.BLOCK_COUNT.format(arch=meta.arch)} is {block_count}, more blocks than the file "
            f"has tensors ({len(header.tensors)})"
        )
    check_weight_types(header, meta.path)
    return block_count, nextn, block_count - nextn


def token_ids(meta: Metadata, *end_keys: str):
    """bos / eos / pad from the tokenizer keys; eos with the other end-of-generation tokens in `end_keys`."""
    eos = int(meta.get(Keys.Tokenizer.EOS_ID, 0, required=False))
    eos_ids = [eos]
    for key in (Keys.Tokenizer.EOT_ID, *end_keys):
        other = meta.get(key, None, required=False)
        if other is not None and int(other) not in eos_ids:
            eos_ids.append(int(other))
    return TokenIds(
        bos=int(meta.get(Keys.Tokenizer.BOS_ID, eos, required=False)),
        eos=tuple(eos_ids),
        pad=int(meta.get(Keys.Tokenizer.PAD_ID, eos, required=False)),
    )


def architecture(meta: Metadata, names: GGUFNames) -> tuple[Architecture, int]:
    """The architecture with `mtp_num_layers` as declared (`gguf._layout` judges the head) and the trunk size."""
    header = meta.header
    block_count, nextn, n_main = trunk_blocks(meta)
    kinds = _layer_kinds(meta, block_count, n_main)
    head_dim = meta.positive(Keys.Attention.KEY_LENGTH)
    rotary = int(meta.get(Keys.Rope.DIMENSION_COUNT, head_dim, required=False))
    sections = [int(s) for s in meta.get(Keys.Rope.DIMENSION_SECTIONS, [], required=False)]
    while sections and sections[-1] == 0:  # the converter pads (T, H, W) to four entries
        sections.pop()
    group_count = meta.positive(Keys.SSM.GROUP_COUNT)
    value_heads = int(meta.get(Keys.SSM.TIME_STEP_RANK))
    inner = int(meta.get(Keys.SSM.INNER_SIZE))
    if value_heads <= 0 or inner % value_heads or value_heads % group_count:
        raise SourceError(
            f"{meta.path}: inconsistent ssm sizes (inner_size {inner}, time_step_rank {value_heads}, "
            f"group_count {group_count})"
        )
    embd = tensor_shapes(header).get("token_embd.weight")
    if embd is None:
        raise SourceError(f"{meta.path}: GGUF tensor token_embd.weight is missing")
    routed = any(rule.canonical == "mlp.gate.weight" for rule in names.ffn)  # the names table has a router
    moe = _moe(meta) if routed else None
    arch = Architecture(
        family=names.family,
        hidden_size=int(meta.get(Keys.LLM.EMBEDDING_LENGTH)),
        intermediate_size=meta.uniform(Keys.LLM.FEED_FORWARD_LENGTH) if moe is None else moe.expert_intermediate_size,
        num_attention_heads=meta.uniform(Keys.Attention.HEAD_COUNT),
        num_key_value_heads=meta.uniform(Keys.Attention.HEAD_COUNT_KV),
        head_dim=head_dim,
        vocab_size=int(embd[0]),
        layer_kinds=kinds,
        rms_norm_eps=_float32(meta.get(Keys.Attention.LAYERNORM_RMS_EPS)),
        rope=Rope(
            theta=_float32(meta.get(Keys.Rope.FREQ_BASE)),
            partial_rotary_factor=rotary / head_dim,
            head_dim=head_dim,
            mrope_section=tuple(sections),
            position_rows=names.position_rows,
        ),
        context_length=int(meta.get(Keys.LLM.CONTEXT_LENGTH)),
        tokens=token_ids(meta),
        linear_attention=LinearAttentionDims(
            num_key_heads=group_count,
            key_head_dim=int(meta.get(Keys.SSM.STATE_SIZE)),
            num_value_heads=value_heads,
            value_head_dim=inner // value_heads,
            conv_kernel=int(meta.get(Keys.SSM.CONV_KERNEL)),
        ),
        tie_word_embeddings="output.weight" not in tensor_shapes(header),
        mtp_num_layers=nextn,
        moe=moe,
    )
    return arch, n_main


def _moe(meta: Metadata) -> MoeDims:
    """The sparse FFN: llama.cpp's qwen35moe graph routes softmax -> top-k -> renormalized, every block."""
    experts = meta.positive(Keys.LLM.EXPERT_COUNT)
    top_k = meta.positive(Keys.LLM.EXPERT_USED_COUNT)
    if top_k > experts:
        key = Keys.LLM.EXPERT_USED_COUNT.format(arch=meta.arch)
        raise SourceError(f"{meta.path}: GGUF metadata key {key!r} ({top_k}) is more than the {experts} experts")
    if meta.get(Keys.LLM.EXPERT_WEIGHTS_NORM, True, required=False) in (False, 0):
        key = Keys.LLM.EXPERT_WEIGHTS_NORM.format(arch=meta.arch)
        raise SourceError(f"{meta.path}: GGUF metadata key {key!r} is false; Qwen3.5-MoE renormalizes its routing")
    expert_size = meta.positive(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH)
    shared = int(meta.get(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, expert_size, required=False))
    return MoeDims(num_experts=experts, top_k=top_k, expert_intermediate_size=expert_size,
                   shared_expert_intermediate_size=shared)


# Not in every gguf-py release's `Keys` yet: llama.cpp's converter writes it from HF `layer_types`.
RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"


def _layer_kinds(meta: Metadata, block_count: int, n_main: int) -> tuple[LayerKind, ...]:
    """The trunk's layer kinds: `recurrent_layers` (one bool per block, MTP blocks included) first."""
    per_layer = interval = None
    recurrent = meta.get(RECURRENT_LAYERS, required=False)
    key = RECURRENT_LAYERS.format(arch=meta.arch)
    if recurrent is not None:
        if not isinstance(recurrent, list) or any(isinstance(v, (str, list, float)) or v not in (0, 1) for v in recurrent):
            raise SourceError(f"{meta.path}: {key} must be an array of booleans (or 0/1), one per block")
        if len(recurrent) != block_count:
            raise SourceError(
                f"{meta.path}: {key} has {len(recurrent)} entries, expected one per block ({block_count}, "
                f"the MTP block included)"
            )
        if any(recurrent[n_main:]):
            raise SourceError(f"{meta.path}: {key} marks an MTP block as recurrent; an MTP block is full attention")
        kinds = tuple(LayerKind.LINEAR_ATTENTION if v else LayerKind.FULL_ATTENTION for v in recurrent)
        per_layer = Declared(key, kinds)
    written = meta.get(Keys.LLM.FULL_ATTENTION_INTERVAL, required=False)
    if written is not None:
        interval = Declared(Keys.LLM.FULL_ATTENTION_INTERVAL.format(arch=meta.arch), written)
    return layer_kinds(
        meta.path, n_main, per_layer=per_layer, interval=interval, placeholder_interval=CONVERTER_PLACEHOLDER_INTERVAL
    )


def _float32(value) -> float:
    """GGUF stores these as FLOAT32: take the shortest decimal that round-trips (1e-06, not 9.99999997e-07)."""
    return shortest_float32(float(value))


_F32 = struct.Struct("<f")


def _to_float32(x: float) -> float:
    """`x` rounded to float32 (to nearest, ties to even, as a C cast and numpy round), as a Python float."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # beyond float32's range: numpy's cast gives infinity
        return math.copysign(math.inf, x)


def shortest_float32(x: float) -> float:
    """The value of `str(numpy.float32(x))`, without numpy: the float32 nearest `x`, written with the fewest
    significant digits that read back as that float32 (the closest such decimal; a tie, the one ending in
    an even digit), as Python reads that text.

    tests/sources/test_gguf_constants.py compares it with numpy on random bit patterns and edge values.
    """
    v = _to_float32(x)
    if v == 0 or not math.isfinite(v):
        return v
    exact = Decimal(v)
    for digits in range(1, 10):  # 9 significant digits always identify a float32
        with localcontext() as ctx:
            ctx.prec = digits
            ctx.rounding = ROUND_FLOOR
            below = +exact
            ctx.rounding = ROUND_CEILING
            above = +exact
        fits = [d for d in dict.fromkeys((below, above)) if _to_float32(float(d)) == v]
        if fits:
            return float(min(fits, key=lambda d: (abs(d - exact), int(d.as_tuple().digits[-1]) % 2)))
    return v


# Types no Qwen3.5 weight is stored in: integers are not weights, and gguf-py dequantizes none of them.
_NOT_WEIGHTS = frozenset((GGMLQuantizationType.I8, GGMLQuantizationType.I16, GGMLQuantizationType.I32,
                          GGMLQuantizationType.I64, GGMLQuantizationType.F64))  # fmt: skip


def check_weight_types(header: GGUFHeader, path: str) -> None:
    """Every tensor is a float or block-quantized weight: an integer tensor is refused, named."""
    for name, info in header.tensors.items():
        if info.type in _NOT_WEIGHTS:
            raise SourceError(
                f"{path}: GGUF tensor {name} has type {info.type.name}; a weight must be a float (F32, F16, BF16) "
                f"or block-quantized type"
            )


def tensor_shapes(header: GGUFHeader) -> dict[str, tuple[int, ...]]:
    return {name: info.shape for name, info in header.tensors.items()}
