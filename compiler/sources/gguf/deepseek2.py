"""GLM-4.7-Flash and DeepSeek-V2/V3 GGUFs (llama.cpp's `deepseek2`) -> Architecture with multi-head latent attention.

DeepSeek-V2/V3 files carry yarn rope scaling (`rope.scaling.type`), which mtpc's Rope does not model yet: refused
at that key. (Their converter drops the MTP layer anyway: `skip_mtp`.)

Keys (conversion/deepseek.py `DeepseekV2Model.set_gguf_parameters`, conversion/glm.py `Glm4MoeLiteModel`, at the
pinned llama.cpp): `attention.kv_lora_rank`, `attention.q_lora_rank` (absent without a q LoRA: DeepSeek-V2-Lite's
`attn_q`), `attention.key_length_mla` = nope + rope and `attention.value_length_mla` = the value head, while
`attention.key_length` / `value_length` are the absorbed cache's (kv_lora + rope, kv_lora) and `head_count_kv` 1;
`rope.dimension_count` the rope head; `leading_dense_block_count` the dense blocks; `expert_group_count` /
`expert_group_used_count`, `expert_weights_scale`, `expert_weights_norm`; `nextn_predict_layers` only when the
converter kept the MTP layer (GLM-4.7-Flash; DeepSeek-V3's converter drops it). A legacy file (before llama.cpp
split kv_b) has no `*_mla` keys: there `key_length` is nope + rope and `value_length` the value head, and one
`attn_kv_b` holds kv_b_proj as HF stores it.

Tensors: the converter writes HF's weights unpermuted (llama.cpp's deepseek2 rotates interleaved pairs,
ROPE_TYPE_NORM, as HF's `rope_interleave`), so the rope rows of `attn_q_b` (per head) and of `attn_kv_a_mqa`
(its last rows) are put in canonical half-split order on read; kv_b_proj is split per head into `attn_k_b`
`[N, R, NOPE]` (the k half, transposed) and `attn_v_b` `[N, VH, R]`, reassembled on read (as float: k_b's
blocks run along NOPE, so a Q8_0 k_b has no exact form along kv_b's rows; the values are its exact dequantization).

Routing, a rule that holds at any size. The converter writes `expert_gating_func` only when config.json has
`scoring_func` (DeepSeek-V3 does, GLM-4.7-Flash does not), and llama.cpp's runtime then guesses by size (sigmoid
for 47 / 48 blocks and a 154880 vocabulary, else softmax). mtpc reads: a selection bias (`exp_probs_b.bias`)
means DeepSeek-V3's `noaux_tc` routing, sigmoid scores with the bias choosing experts, unless
`expert_gating_func` says softmax (refused: no model routes so); no bias means `expert_gating_func`'s scores, or
softmax when it is absent (DeepSeek-V2, llama.cpp's default).
"""

from __future__ import annotations

from dataclasses import replace

from ...util.diagnostics import SourceError
from ...ir import Architecture, HeadLayout, LayerKind, MlaDims, MoeDims, Rope
from ...ir.moe import SIGMOID, SOFTMAX
from .constants import Keys
from .metadata import Metadata, _float32, tensor_shapes, token_ids, trunk_blocks
from .names import QWEN35, GGUFNames, Rule, Transform
from .glm4moe import ROUTED_FFN
from .routed_experts import grouped_moe

# llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_*.
GATING = {1: SOFTMAX, 2: SIGMOID}
# The cached latent's norms: transformers builds q_a_layernorm / kv_a_layernorm with RMSNorm's default eps, not
# rms_norm_eps (llama.cpp uses rms_norm_eps for them; GGUF has no key for it).
LATENT_NORM_EPS = 1e-6


def _key(meta: Metadata, key: str) -> str:
    return key.format(arch=meta.arch)


def architecture(meta: Metadata, names: GGUFNames) -> tuple[Architecture, int]:
    """The architecture with `mtp_num_layers` as declared (`layout` judges the head) and the trunk size."""
    _, nextn, n_main = trunk_blocks(meta)
    shapes = tensor_shapes(meta.header)
    embd = shapes.get("token_embd.weight")
    if embd is None:
        raise SourceError(f"{meta.path}: GGUF tensor token_embd.weight is missing")
    mla = _mla(meta)
    moe = _moe(meta, n_main, shapes)
    arch = Architecture(
        family=names.family,
        hidden_size=int(meta.get(Keys.LLM.EMBEDDING_LENGTH)),
        intermediate_size=meta.uniform(Keys.LLM.FEED_FORWARD_LENGTH) if moe.dense_layers else
        int(meta.get(Keys.LLM.FEED_FORWARD_LENGTH, 0, required=False) or 0),
        num_attention_heads=meta.uniform(Keys.Attention.HEAD_COUNT),
        # The absorbed form (`ir/mla.py`): one KV head, the latent [rope(k_rope) | c] wide.
        num_key_value_heads=1,
        head_dim=mla.latent_dim,
        vocab_size=int(embd[0]),
        layer_kinds=(LayerKind.FULL_ATTENTION,) * n_main,
        rms_norm_eps=_float32(meta.get(Keys.Attention.LAYERNORM_RMS_EPS)),
        rope=Rope(theta=_float32(meta.get(Keys.Rope.FREQ_BASE)), partial_rotary_factor=1.0,
                  head_dim=mla.qk_rope_head_dim, position_rows=False),
        context_length=int(meta.get(Keys.LLM.CONTEXT_LENGTH)),
        tokens=token_ids(meta, Keys.Tokenizer.EOM_ID),
        tie_word_embeddings="output.weight" not in shapes,
        mtp_num_layers=nextn,
        moe=moe,
        head_layout=HeadLayout.TRAILING_LAYER,
        attention_output_gate=False,
        attention_bias=False,
        qk_norm=False,
        mla=mla,
    )
    return arch, n_main


def _mla(meta: Metadata) -> MlaDims:
    rope = meta.positive(Keys.Rope.DIMENSION_COUNT)
    kv_lora = meta.positive(Keys.Attention.KV_LORA_RANK)
    q_lora = meta.get(Keys.Attention.Q_LORA_RANK, 0, required=False) or None
    if meta.get(Keys.Attention.KEY_LENGTH_MLA, required=False) is not None:
        # Today's converter: key_length / value_length are the absorbed cache's, the per-head sizes are *_mla.
        key, value = Keys.Attention.KEY_LENGTH_MLA, Keys.Attention.VALUE_LENGTH_MLA
        for k, want in ((Keys.Attention.KEY_LENGTH, kv_lora + rope), (Keys.Attention.VALUE_LENGTH, kv_lora)):
            stated = meta.get(k, want, required=False)
            if int(stated) != want:
                raise SourceError(f"{meta.path}: GGUF metadata key {_key(meta, k)!r} is {stated}; with "
                                  f"{_key(meta, Keys.Attention.KEY_LENGTH_MLA)!r} it is the cached latent's width "
                                  f"({want})")
    else:  # a legacy file (one attn_kv_b): key_length / value_length are the per-head sizes
        key, value = Keys.Attention.KEY_LENGTH, Keys.Attention.VALUE_LENGTH
    qk = meta.positive(key)
    if qk <= rope:
        raise SourceError(f"{meta.path}: GGUF metadata key {_key(meta, key)!r} ({qk}) must exceed "
                          f"{_key(meta, Keys.Rope.DIMENSION_COUNT)!r} ({rope}): it is nope + rope per head")
    if rope % 2:
        raise SourceError(f"{meta.path}: GGUF metadata key {_key(meta, Keys.Rope.DIMENSION_COUNT)!r} ({rope}) must be even")
    scaling = meta.get(Keys.Rope.SCALING_TYPE, "none", required=False)
    if scaling not in ("none", ""):
        # DeepSeek-V3's yarn changes the rotation and the softmax scale (mscale); mtpc's Rope has no yarn yet.
        raise SourceError(f"{meta.path}: GGUF metadata key {_key(meta, Keys.Rope.SCALING_TYPE)!r} is {scaling!r}; "
                          f"mtpc reads deepseek2 files without rope scaling only")
    return MlaDims(kv_lora_rank=kv_lora, qk_nope_head_dim=qk - rope, qk_rope_head_dim=rope,
                   v_head_dim=meta.positive(value), softmax_scale=qk ** -0.5, q_lora_rank=q_lora,
                   latent_norm_eps=LATENT_NORM_EPS, source_rope_interleaved=True)  # llama.cpp's ROPE_TYPE_NORM


def _moe(meta: Metadata, n_main: int, shapes: dict) -> MoeDims:
    # Any block's bias says the model has one: then every sparse block needs its own, and one left out is named.
    scoring, bias = _routing(meta, any(n.endswith(".exp_probs_b.bias") for n in shapes))
    groups = int(meta.get(Keys.LLM.EXPERT_GROUP_COUNT, 1, required=False)) or 1
    if scoring == SOFTMAX and groups > 1:
        raise SourceError(f"{meta.path}: softmax routing over expert groups ({_key(meta, Keys.LLM.EXPERT_GROUP_COUNT)!r}"
                          f" {groups}: DeepSeek-V2's group_limited_greedy) is not supported")
    return grouped_moe(meta, n_main, scoring=scoring, selection_bias=bias, shared_default=0,
                       block="the deepseek2 sparse block with its shared expert(s)")


def _routing(meta: Metadata, has_bias: bool) -> tuple[str, bool]:
    """(scoring, selection bias): the rule in the module's docstring, not llama.cpp's guess by size."""
    key = _key(meta, Keys.LLM.EXPERT_GATING_FUNC)
    stated = meta.get(Keys.LLM.EXPERT_GATING_FUNC, None, required=False)
    if stated is not None and int(stated) not in GATING:
        raise SourceError(f"{meta.path}: GGUF metadata key {key!r} is {stated}; mtpc routes by softmax (1) or "
                          f"sigmoid (2) scores")
    if has_bias:
        if stated is not None and GATING[int(stated)] != SIGMOID:
            raise SourceError(f"{meta.path}: GGUF metadata key {key!r} says softmax, but the file has a selection "
                              f"bias (exp_probs_b.bias), which goes with sigmoid scores (noaux_tc)")
        return SIGMOID, True
    return (SOFTMAX if stated is None else GATING[int(stated)]), False


_R = Transform

# GLM-4.7-Flash as llama.cpp's converter writes it: a q LoRA, kv_b split into attn_k_b / attn_v_b, the selection
# bias; the pre-FFN norm is `ffn_norm` (not GLM-4.5's post_attention_norm); the MTP layer's nextn tensors as GLM-4.5's.
NAMES = GGUFNames(
    family="deepseek2",
    global_required=QWEN35.global_required,
    output=QWEN35.output,
    every_block=(
        Rule("attn_norm.weight", "input_layernorm.weight", ("H",)),
        Rule("ffn_norm.weight", "post_attention_layernorm.weight", ("H",)),
    ),
    full_attention=(
        Rule("attn_q_a.weight", "self_attn.q_a_proj.weight", ("QR", "H")),
        Rule("attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", ("QR",)),
        Rule("attn_q_b.weight", "self_attn.q_b_proj.weight", ("QB", "QR"), _R.ROPE_ROWS_PER_HEAD),
        Rule("attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", ("KVA", "H"), _R.ROPE_ROWS_LAST),
        Rule("attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", ("R",)),
        Rule("attn_k_b.weight", "self_attn.kv_b_proj.weight", ("N", "R", "NOPE"), _R.KV_B_SPLIT,
             parts=(("attn_v_b.weight", ("N", "VH", "R")),)),
        Rule("attn_output.weight", "self_attn.o_proj.weight", ("H", "OV")),
    ),
    linear_attention=(),
    ffn=ROUTED_FFN,
    dense_ffn=QWEN35.ffn,
    nextn_required=QWEN35.nextn_required,
    nextn_optional=QWEN35.nextn_optional,
    nextn_fallback=QWEN35.nextn_fallback,
    position_rows=False,
)

_Q_PROJ = Rule("attn_q.weight", "self_attn.q_proj.weight", ("QB", "H"), _R.ROPE_ROWS_PER_HEAD)
_KV_B_LEGACY = Rule("attn_kv_b.weight", "self_attn.kv_b_proj.weight", ("KVB", "R"))


def names_for(arch: Architecture, present: dict) -> GGUFNames:
    """The table this file is read with: without a q LoRA `attn_q`; a legacy file's one `attn_kv_b`; no
    `exp_probs_b` without a selection bias."""
    assert arch.mla is not None and arch.moe is not None
    attention = NAMES.full_attention
    if arch.mla.q_lora_rank is None:
        attention = (_Q_PROJ,) + tuple(r for r in attention if not r.gguf.startswith("attn_q_"))
    if "blk.0.attn_kv_b.weight" in present and "blk.0.attn_k_b.weight" not in present:
        attention = tuple(_KV_B_LEGACY if r.transform is _R.KV_B_SPLIT else r for r in attention)
    ffn = NAMES.ffn if arch.moe.selection_bias else tuple(r for r in NAMES.ffn if r.gguf != "exp_probs_b.bias")
    return replace(NAMES, full_attention=attention, ffn=ffn, variant=None)


NAMES = replace(NAMES, variant=names_for)
