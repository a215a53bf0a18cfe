"""The canonical tensors an architecture needs, with their shapes: what lowering checks a source
against and what the metadata verbs report, without touching a weight (names and conventions: `store`)."""

from __future__ import annotations

from ..ir import Architecture, LayerAttention, LayerKind, MlaDims, MoeDims
from ..ir.vision import VisionTower


def canonical_shapes(arch: Architecture) -> dict[str, tuple[int, ...]]:
    """Every canonical tensor `arch` needs, with its shape."""
    h, v, inter = arch.hidden_size, arch.vocab_size, arch.intermediate_size
    nh, kvh, hd = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (v, h), "lm_head.weight": (v, h), "norm.weight": (h,)}

    def attention(p: str, layer: LayerAttention) -> None:
        if arch.mla is not None:
            shapes.update(mla_shapes(p, h, nh, arch.mla))
            return
        nh_, kvh_, hd_, vd_ = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim, layer.value_head_dim
        q_rows = (2 if arch.attention_output_gate else 1) * nh_ * hd_  # gated: per head [query | gate]
        shapes.update(
            {
                p + "self_attn.q_proj.weight": (q_rows, h),
                p + "self_attn.k_proj.weight": (kvh_ * hd_, h),
                p + "self_attn.v_proj.weight": (kvh_ * vd_, h),
                p + "self_attn.o_proj.weight": (h, nh_ * vd_),
            }
        )
        if arch.attention_bias:
            shapes.update({p + "self_attn.q_proj.bias": (nh_ * hd_,), p + "self_attn.k_proj.bias": (kvh_ * hd_,),
                           p + "self_attn.v_proj.bias": (kvh_ * vd_,)})
        if arch.qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (hd_,), p + "self_attn.k_norm.weight": (hd_,)})
        if arch.attention_head_gate:
            shapes[p + "self_attn.g_proj.weight"] = (nh_, h)
        if layer.sinks:
            shapes[p + "self_attn.sinks"] = (nh_,)

    def mlp_and_norms(p: str, layer: int | None) -> None:
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)})
        if arch.moe is not None and arch.is_sparse(layer):
            shapes.update(moe_shapes(p, h, arch.moe))
            return
        shapes.update(
            {
                p + "mlp.gate_proj.weight": (inter, h),
                p + "mlp.up_proj.weight": (inter, h),
                p + "mlp.down_proj.weight": (h, inter),
            }
        )

    la = arch.linear_attention
    for i, kind in enumerate(arch.layer_kinds):
        p = f"layers.{i}."
        if kind is not LayerKind.LINEAR_ATTENTION:
            attention(p, arch.layer_attention(kind))
        elif la is not None:
            q = p + "linear_attn."
            shapes.update(
                {
                    q + "in_proj_qkv.weight": (la.conv_dim, h),
                    q + "in_proj_z.weight": (la.value_dim, h),
                    q + "in_proj_b.weight": (la.num_value_heads, h),
                    q + "in_proj_a.weight": (la.num_value_heads, h),
                    q + "conv1d.weight": (la.conv_dim, 1, la.conv_kernel),
                    q + "dt_bias": (la.num_value_heads,),
                    q + "decay_scale": (la.num_value_heads,),
                    q + "norm.weight": (la.value_head_dim,),
                    q + "out_proj.weight": (h, la.value_dim),
                }
            )
        mlp_and_norms(p, i)
    for j in range(arch.mtp_num_layers):
        attention(f"mtp.layers.{j}.", arch.attention_at(None))
        mlp_and_norms(f"mtp.layers.{j}.", None)
    if arch.mtp_num_layers:
        shapes["mtp.fc.weight"] = (h, 2 * h)
        for norm in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"):
            shapes[norm] = (h,)
        if arch.mtp_own_lm_head:  # the head's own LM head as the checkpoint stores it (Step-3.5's shared_head.output)
            shapes["mtp.lm_head.weight"] = (v, h)
    if arch.vision is not None:
        shapes.update(vision_shapes(arch.vision.tower))
    return shapes


def vision_shapes(tower: VisionTower) -> dict[str, tuple[int, ...]]:
    """The vision tower's canonical tensors (`visual.*`): transformers' `Qwen3_5VisionModel` names, the patch
    embedding's Conv3d kernel as the linear over a flattened patch."""
    d, m = tower.hidden_size, tower.merged_width
    shapes: dict[str, tuple[int, ...]] = {
        "visual.patch_embed.proj.weight": (d, tower.patch_width),
        "visual.patch_embed.proj.bias": (d,),
        "visual.pos_embed.weight": (tower.num_position_embeddings, d),
        "visual.merger.norm.weight": (d,),
        "visual.merger.norm.bias": (d,),
        "visual.merger.linear_fc1.weight": (m, m),
        "visual.merger.linear_fc1.bias": (m,),
        "visual.merger.linear_fc2.weight": (tower.out_hidden_size, m),
        "visual.merger.linear_fc2.bias": (tower.out_hidden_size,),
    }
    for i in range(tower.depth):
        p = f"visual.blocks.{i}."
        shapes.update({
            p + "norm1.weight": (d,), p + "norm1.bias": (d,), p + "norm2.weight": (d,), p + "norm2.bias": (d,),
            p + "attn.qkv.weight": (3 * d, d), p + "attn.qkv.bias": (3 * d,),
            p + "attn.proj.weight": (d, d), p + "attn.proj.bias": (d,),
            p + "mlp.linear_fc1.weight": (tower.intermediate_size, d), p + "mlp.linear_fc1.bias": (tower.intermediate_size,),
            p + "mlp.linear_fc2.weight": (d, tower.intermediate_size), p + "mlp.linear_fc2.bias": (d,),
        })
    return shapes


def mla_shapes(prefix: str, hidden: int, heads: int, mla: MlaDims) -> dict[str, tuple[int, ...]]:
    """The canonical tensors of one multi-head latent attention block under `prefix` (`ir/mla.py`)."""
    p = prefix + "self_attn."
    q_rows = heads * mla.qk_head_dim
    shapes: dict[str, tuple[int, ...]] = {
        p + "kv_a_proj_with_mqa.weight": (mla.kv_lora_rank + mla.qk_rope_head_dim, hidden),
        p + "kv_a_layernorm.weight": (mla.kv_lora_rank,),
        p + "kv_b_proj.weight": (heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank),
        p + "o_proj.weight": (hidden, heads * mla.v_head_dim),
    }
    if mla.q_lora_rank is None:
        shapes[p + "q_proj.weight"] = (q_rows, hidden)
    else:
        shapes.update({p + "q_a_proj.weight": (mla.q_lora_rank, hidden), p + "q_a_layernorm.weight": (mla.q_lora_rank,),
                       p + "q_b_proj.weight": (q_rows, mla.q_lora_rank)})
    return shapes


def moe_shapes(prefix: str, hidden: int, moe: MoeDims) -> dict[str, tuple[int, ...]]:
    """The canonical tensors of one sparse MoE FFN under `prefix` (a layer's, ending in ".")."""
    e, i, s = moe.num_experts, moe.expert_intermediate_size, moe.shared_expert_intermediate_size
    p = prefix + "mlp."
    shapes = {
        p + "gate.weight": (e, hidden),
        p + "experts.gate_proj.weight": (e, i, hidden),
        p + "experts.up_proj.weight": (e, i, hidden),
        p + "experts.down_proj.weight": (e, hidden, i),
        p + "shared_expert.gate_proj.weight": (s, hidden),
        p + "shared_expert.up_proj.weight": (s, hidden),
        p + "shared_expert.down_proj.weight": (hidden, s),
    }
    if moe.selection_bias:
        shapes[p + "gate.e_score_correction_bias"] = (e,)
    if moe.shared_expert_sigmoid_gate:
        shapes[p + "shared_expert_gate.weight"] = (1, hidden)
    return shapes
