"""GLM-4.5 GGUF metadata (`glm4moe`, as llama.cpp's converter writes it) -> Architecture.

Keys (conversion/glm.py `Glm4MoeModel.set_gguf_parameters` and the generic ones it inherits):
`block_count` counts the MTP layer (`nextn_predict_layers` of them), `attention.key_length` is
`head_dim` (stated, not hidden / heads), `rope.dimension_count` the rotary width (head_dim x
partial_rotary_factor; NeoX order, no Q/K permutation), `leading_dense_block_count` the dense
blocks, `expert_group_count` / `expert_group_used_count` the group-limited routing,
`expert_shared_count` shared experts of `expert_feed_forward_length` each, `expert_gating_func` 2
(sigmoid), `expert_weights_scale` / `expert_weights_norm` the scaling and renormalization. Whether
attention has q/k/v biases and q/k norms is told by the tensors (no key says it). The end of
generation is eos, eot and eom (`<|endoftext|>`, `<|user|>`, `<|observation|>` in GLM's vocabulary).
"""

from __future__ import annotations

from ...util.diagnostics import SourceError
from ...ir import Architecture, HeadLayout, LayerKind, MoeDims, Rope
from ...ir.moe import SIGMOID
from .constants import Keys
from .metadata import Metadata, _float32, tensor_shapes, token_ids, trunk_blocks
from .names import EXPERTS, QWEN35, GGUFNames, Rule
from .routed_experts import grouped_moe, require_sigmoid_gating


def architecture(meta: Metadata, names: GGUFNames) -> tuple[Architecture, int]:
    """The architecture with `mtp_num_layers` as declared (`layout` judges the head) and the trunk size."""
    _, nextn, n_main = trunk_blocks(meta)
    head_dim = meta.positive(Keys.Attention.KEY_LENGTH)
    rotary = int(meta.get(Keys.Rope.DIMENSION_COUNT, head_dim // 2, required=False))
    shapes = tensor_shapes(meta.header)
    embd = shapes.get("token_embd.weight")
    if embd is None:
        raise SourceError(f"{meta.path}: GGUF tensor token_embd.weight is missing")
    flags = {flag: name in shapes for flag, name in names.flag_tensors}
    moe = _moe(meta, n_main)
    arch = Architecture(
        family=names.family,
        hidden_size=int(meta.get(Keys.LLM.EMBEDDING_LENGTH)),
        intermediate_size=meta.uniform(Keys.LLM.FEED_FORWARD_LENGTH) if moe.dense_layers else
        int(meta.get(Keys.LLM.FEED_FORWARD_LENGTH, 0, required=False) or 0),
        num_attention_heads=meta.uniform(Keys.Attention.HEAD_COUNT),
        num_key_value_heads=meta.uniform(Keys.Attention.HEAD_COUNT_KV),
        head_dim=head_dim,
        vocab_size=int(embd[0]),
        layer_kinds=(LayerKind.FULL_ATTENTION,) * n_main,
        rms_norm_eps=_float32(meta.get(Keys.Attention.LAYERNORM_RMS_EPS)),
        rope=Rope(theta=_float32(meta.get(Keys.Rope.FREQ_BASE)), partial_rotary_factor=rotary / head_dim,
                  head_dim=head_dim, position_rows=False),
        context_length=int(meta.get(Keys.LLM.CONTEXT_LENGTH)),
        tokens=token_ids(meta, Keys.Tokenizer.EOM_ID),
        tie_word_embeddings="output.weight" not in shapes,
        mtp_num_layers=nextn,
        moe=moe,
        head_layout=HeadLayout.TRAILING_LAYER,
        attention_output_gate=False,
        **flags,
    )
    if not 0 < arch.rope.rotary_dim <= head_dim or arch.rope.rotary_dim % 2:
        raise SourceError(f"{meta.path}: {Keys.Rope.DIMENSION_COUNT.format(arch=meta.arch)} ({rotary}) must be an even "
                          f"rotary width of at most key_length ({head_dim})")
    return arch, n_main


def _moe(meta: Metadata, n_main: int) -> MoeDims:
    require_sigmoid_gating(meta, "GLM-4.5")
    return grouped_moe(meta, n_main, scoring=SIGMOID, selection_bias=True, shared_default=1,
                       block="GLM's sparse block with its shared expert")


# The sparse block with a selection bias (DeepSeek-V3's `noaux_tc` routing), as GLM-4.5 and deepseek2 store it.
ROUTED_FFN = (
    Rule("ffn_gate_inp.weight", "mlp.gate.weight", ("E", "H")),
    Rule("exp_probs_b.bias", "mlp.gate.e_score_correction_bias", ("E",)),
    *EXPERTS,
)


# GLM-4.5 (llama.cpp's `glm4moe`, conversion/glm.py `Glm4MoeModel`): grouped-query attention with optional
# q/k/v biases and q/k norms, no Q/K permutation (NeoX order already), plain RMSNorm scales (nothing baked
# in); the first `leading_dense_block_count` blocks dense, the others sparse with the selection bias
# `exp_probs_b.bias` and an ungated shared expert; the MTP layer is the trailing block `blk.{n}` with
# `nextn.*` beside its ordinary block tensors (its `nextn.embed_tokens` / `nextn.shared_head_head` only when
# the checkpoint stores them: GLM-4.5 does, GLM-4.6 not).
NAMES = GGUFNames(
    family="glm4moe",
    global_required=QWEN35.global_required,
    output=QWEN35.output,
    every_block=QWEN35.every_block,
    full_attention=(
        Rule("attn_q.weight", "self_attn.q_proj.weight", ("O", "H")),
        Rule("attn_k.weight", "self_attn.k_proj.weight", ("KV", "H")),
        Rule("attn_v.weight", "self_attn.v_proj.weight", ("KV", "H")),
        Rule("attn_output.weight", "self_attn.o_proj.weight", ("H", "O")),
    ),
    linear_attention=(),
    ffn=ROUTED_FFN,
    dense_ffn=QWEN35.ffn,
    nextn_required=QWEN35.nextn_required,
    nextn_optional=QWEN35.nextn_optional,
    nextn_fallback=QWEN35.nextn_fallback,
    optional_attention=(
        ("attention_bias", (
            Rule("attn_q.bias", "self_attn.q_proj.bias", ("O",)),
            Rule("attn_k.bias", "self_attn.k_proj.bias", ("KV",)),
            Rule("attn_v.bias", "self_attn.v_proj.bias", ("KV",)),
        )),
        ("qk_norm", (
            Rule("attn_q_norm.weight", "self_attn.q_norm.weight", ("HD",)),
            Rule("attn_k_norm.weight", "self_attn.k_norm.weight", ("HD",)),
        )),
    ),
    flag_tensors=(("attention_bias", "blk.0.attn_q.bias"), ("qk_norm", "blk.0.attn_q_norm.weight")),
)
