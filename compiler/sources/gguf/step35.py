"""Step-3.5 GGUF metadata (`step35`, as llama.cpp's converter writes it) -> Architecture, and its tensor table.

Keys (conversion/step3.py `Step35Model.set_gguf_parameters`): `block_count` counts the MTP layers
(`nextn_predict_layers` of them); `attention.head_count` / `head_count_kv` are per block, the MTP blocks included
(a sliding block has its own query heads); `attention.sliding_window` and `sliding_window_pattern` (a bool per
block) give the window and which blocks slide; `rope.freq_base` is the full layers' theta and `rope.freq_base_swa`
the sliding layers'; `key_length` the head. The converter asserts the rotary pattern (all of a sliding layer's
head, half of a full layer's) and llama.cpp's runtime rotates `rope.dimension_count` (default: the head) on
sliding layers and half of it on full ones (src/models/step35.cpp `n_rot_full / 2`), so these are read as such.
The sparse block: `expert_count` / `expert_used_count` / `expert_feed_forward_length`, a shared expert of
`expert_shared_feed_forward_length`, sigmoid gating (`expert_gating_func` 2) with the selection bias
`exp_probs_b.bias`, `expert_weights_norm` / `expert_weights_scale`, `leading_dense_block_count` dense blocks;
`swiglu_clamp_exp` / `swiglu_clamp_shexp` the per-block clamps (0: none).

Tensors: norms are stored with the 1 of the zero-centred form already added (the converter adds it); the gate
per head is `attn_gate.weight`; the MTP blocks `blk.{L + k}` hold an ordinary block (sliding attention, dense FFN)
and `nextn.{eh_proj, enorm, hnorm, shared_head_norm, shared_head_head}`. The first is the package's head, its own
LM head `shared_head_head` read as `mtp.lm_head.weight`; the later ones are served as `mtp.heads.{k}.*`, unused.
"""

from __future__ import annotations

from ...util.diagnostics import SourceError
from ...ir import (Architecture, HeadLayout, LayerAttention, LayerKind, MoeDims, Rope, SeedHidden, SwigluLimits)
from ...ir.moe import SIGMOID
from .constants import Keys
from .glm4moe import ROUTED_FFN
from .metadata import Metadata, _float32, tensor_shapes, token_ids, trunk_blocks
from .names import QWEN35, GGUFNames, Rule
from .routed_experts import require_sigmoid_gating

_SLIDING_WINDOW = "{arch}.attention.sliding_window"
_SLIDING_PATTERN = "{arch}.attention.sliding_window_pattern"
_FREQ_BASE_SWA = "{arch}.rope.freq_base_swa"
_CLAMP_ROUTED = "{arch}.swiglu_clamp_exp"
_CLAMP_SHARED = "{arch}.swiglu_clamp_shexp"


def _per_block(meta: Metadata, key: str, blocks: int, default=None) -> list:
    value = meta.get(key, default, required=default is None)
    if not isinstance(value, list):
        return [value] * blocks
    if len(value) != blocks:
        raise SourceError(f"{meta.path}: GGUF metadata key {key.format(arch=meta.arch)!r} lists {len(value)} values "
                          f"for {blocks} blocks")
    return value


def _one_per_kind(meta: Metadata, key: str, values: list, kinds: list[LayerKind]) -> dict[LayerKind, int]:
    out: dict[LayerKind, int] = {}
    for value, kind in zip(values, kinds):
        if out.setdefault(kind, int(value)) != int(value):
            raise SourceError(f"{meta.path}: GGUF metadata key {key.format(arch=meta.arch)!r} differs among "
                              f"{kind.value} blocks ({out[kind]} and {int(value)}), which mtpc does not support")
    return out


def architecture(meta: Metadata, names: GGUFNames) -> tuple[Architecture, int]:
    """The architecture with `mtp_num_layers` as declared (`layout` judges the head) and the trunk size."""
    blocks, nextn, n_main = trunk_blocks(meta)
    head_dim = meta.positive(Keys.Attention.KEY_LENGTH)
    value_dim = int(meta.get(Keys.Attention.VALUE_LENGTH, head_dim, required=False))
    if value_dim != head_dim:
        raise SourceError(f"{meta.path}: GGUF metadata key {Keys.Attention.VALUE_LENGTH.format(arch=meta.arch)!r} "
                          f"({value_dim}) differs from key_length ({head_dim}); Step-3.5's heads are one width")
    shapes = tensor_shapes(meta.header)
    embd = shapes.get("token_embd.weight")
    if embd is None:
        raise SourceError(f"{meta.path}: GGUF tensor token_embd.weight is missing")
    pattern = _per_block(meta, _SLIDING_PATTERN, blocks, default=False)
    kinds = [LayerKind.SLIDING_ATTENTION if p else LayerKind.FULL_ATTENTION for p in pattern]
    heads = _one_per_kind(meta, Keys.Attention.HEAD_COUNT, _per_block(meta, Keys.Attention.HEAD_COUNT, blocks), kinds)
    kv_heads = _one_per_kind(meta, Keys.Attention.HEAD_COUNT_KV,
                             _per_block(meta, Keys.Attention.HEAD_COUNT_KV, blocks), kinds)
    rotary = int(meta.get(Keys.Rope.DIMENSION_COUNT, head_dim, required=False))
    full_rope = Rope(_float32(meta.get(Keys.Rope.FREQ_BASE)), rotary / 2 / head_dim, head_dim, position_rows=False)
    sliding = window = None
    if LayerKind.SLIDING_ATTENTION in kinds:
        window = int(meta.get(_SLIDING_WINDOW))
        theta = _float32(meta.get(_FREQ_BASE_SWA, meta.get(Keys.Rope.FREQ_BASE), required=False))
        kind = LayerKind.SLIDING_ATTENTION
        sliding = LayerAttention(heads[kind], kv_heads[kind], head_dim, head_dim,
                                 Rope(theta, rotary / head_dim, head_dim, position_rows=False), window=window)
    full = LayerKind.FULL_ATTENTION if LayerKind.FULL_ATTENTION in heads else LayerKind.SLIDING_ATTENTION
    limits = SwigluLimits(tuple(float(v) for v in _per_block(meta, _CLAMP_ROUTED, blocks, default=0.0)),
                          tuple(float(v) for v in _per_block(meta, _CLAMP_SHARED, blocks, default=0.0)))
    arch = Architecture(
        family=names.family, hidden_size=int(meta.get(Keys.LLM.EMBEDDING_LENGTH)),
        intermediate_size=meta.uniform(Keys.LLM.FEED_FORWARD_LENGTH), num_attention_heads=heads[full],
        num_key_value_heads=kv_heads[full], head_dim=head_dim, vocab_size=int(embd[0]),
        layer_kinds=tuple(kinds[:n_main]), rms_norm_eps=_float32(meta.get(Keys.Attention.LAYERNORM_RMS_EPS)),
        rope=full_rope if full is LayerKind.FULL_ATTENTION else sliding.rope,
        context_length=int(meta.get(Keys.LLM.CONTEXT_LENGTH)), tokens=token_ids(meta),
        sliding_window=window, tie_word_embeddings="output.weight" not in shapes, moe=_moe(meta, n_main, nextn),
        mtp_num_layers=min(nextn, 1), head_layout=HeadLayout.TRAILING_LAYER, attention_output_gate=False,
        attention_bias=False, qk_norm=True, attention_head_gate=True, sliding_attention=sliding,
        mtp_layer_kind=kinds[n_main] if nextn else LayerKind.FULL_ATTENTION, mtp_chained_layers=nextn,
        mtp_own_lm_head=True, mtp_seed_hidden=SeedHidden.PRE_NORM, swiglu_limits=limits,
    )
    for kind in set(kinds):
        rope = arch.layer_attention(kind).rope
        if not 0 < rope.rotary_dim <= head_dim or rope.rotary_dim % 2:
            raise SourceError(f"{meta.path}: {Keys.Rope.DIMENSION_COUNT.format(arch=meta.arch)} ({rotary}) gives "
                              f"{kind.value} blocks rotary dim {rope.rotary_dim} of key_length {head_dim}")
    return arch, n_main


def _moe(meta: Metadata, n_main: int, nextn: int) -> MoeDims:
    def key(k: str) -> str:
        return k.format(arch=meta.arch)

    require_sigmoid_gating(meta, "Step-3.5")
    if meta.get(Keys.LLM.EXPERT_WEIGHTS_NORM, True, required=False) in (False, 0):
        raise SourceError(f"{meta.path}: GGUF metadata key {key(Keys.LLM.EXPERT_WEIGHTS_NORM)!r} is false; Step-3.5 "
                          "renormalizes the chosen experts' weights")
    experts, top_k = meta.positive(Keys.LLM.EXPERT_COUNT), meta.positive(Keys.LLM.EXPERT_USED_COUNT)
    if top_k > experts:
        raise SourceError(f"{meta.path}: GGUF metadata key {key(Keys.LLM.EXPERT_USED_COUNT)!r} ({top_k}) is more than "
                          f"the {experts} experts")
    dense = int(meta.get(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, 0, required=False))
    if dense > n_main:
        raise SourceError(f"{meta.path}: GGUF metadata key {key(Keys.LLM.LEADING_DENSE_BLOCK_COUNT)!r} ({dense}) is "
                          f"more than the {n_main} trunk blocks")
    # The MTP blocks' FFN is dense in the release (its moe_layers_enum stops at the trunk); the file's tensors say it.
    shapes = tensor_shapes(meta.header)
    sparse_mtp = bool(nextn) and f"blk.{n_main}.ffn_gate_inp.weight" in shapes
    return MoeDims(num_experts=experts, top_k=top_k, expert_intermediate_size=meta.positive(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH),
                   shared_expert_intermediate_size=meta.positive(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH),
                   normalize_top_k=True, shared_expert_sigmoid_gate=False, scoring=SIGMOID, selection_bias=True,
                   routed_scaling_factor=_float32(meta.get(Keys.LLM.EXPERT_WEIGHTS_SCALE, 1.0, required=False)),
                   dense_layers=dense, sparse_mtp=sparse_mtp)


def _attention(query_rows: str, heads: str) -> tuple[Rule, ...]:
    return (
        Rule("attn_q.weight", "self_attn.q_proj.weight", (query_rows, "H")),
        Rule("attn_k.weight", "self_attn.k_proj.weight", ("KV", "H")),
        Rule("attn_v.weight", "self_attn.v_proj.weight", ("KV", "H")),
        Rule("attn_output.weight", "self_attn.o_proj.weight", ("H", query_rows)),
        Rule("attn_gate.weight", "self_attn.g_proj.weight", (heads, "H")),
        Rule("attn_q_norm.weight", "self_attn.q_norm.weight", ("HD",)),
        Rule("attn_k_norm.weight", "self_attn.k_norm.weight", ("HD",)),
    )


# Step-3.5 (llama.cpp's `step35`, conversion/step3.py `Step35Model`): no Q/K permutation (NeoX order), norms with
# their 1 added; full and sliding blocks alike but for their query heads (`O` / `NH`, `OS` / `NHS`); the MTP blocks'
# own LM head is required (the head scores with it, as llama.cpp's graph_mtp and vLLM do).
NAMES = GGUFNames(
    family="step35",
    global_required=QWEN35.global_required,
    output=QWEN35.output,
    every_block=(Rule("attn_norm.weight", "input_layernorm.weight", ("H",)),
                 Rule("ffn_norm.weight", "post_attention_layernorm.weight", ("H",))),
    full_attention=_attention("O", "NH"),
    sliding_attention=_attention("OS", "NHS"),
    linear_attention=(),
    ffn=ROUTED_FFN,
    dense_ffn=QWEN35.ffn,
    nextn_required=(*QWEN35.nextn_required, Rule("nextn.shared_head_head.weight", "mtp.lm_head.weight", ("V", "H"))),
    nextn_optional=(QWEN35.nextn_optional[0],),
    nextn_fallback=QWEN35.nextn_fallback,
)
