"""`source.synthetic` (schema defaults filled in) -> the typed `SyntheticSpec` a synthetic source builds."""

from __future__ import annotations

from ..ir import (
    Architecture,
    HeadLayout,
    LayerKind,
    LinearAttentionDims,
    MoeDims,
    Rope,
    SyntheticSpec,
    TokenIds,
    hybrid_layer_kinds,
)
from ..ir.moe import SIGMOID

GLM = "glm4moe"


def synthetic_spec(settings: dict) -> SyntheticSpec:
    lin, rope, tokens = settings["linear_attention"], settings["rope"], settings["tokens"]
    eos = tokens["eos"]
    family = settings["architecture"]
    moe = _moe(family, settings["moe"])
    glm = family == GLM
    architecture = Architecture(
        family=family,
        hidden_size=settings["hidden_size"],
        intermediate_size=settings["intermediate_size"] if moe is None or glm else moe.expert_intermediate_size,
        num_attention_heads=settings["num_attention_heads"],
        num_key_value_heads=settings["num_key_value_heads"],
        head_dim=settings["head_dim"],
        vocab_size=settings["vocab_size"],
        layer_kinds=((LayerKind.FULL_ATTENTION,) * settings["num_layers"] if glm
                     else hybrid_layer_kinds(settings["num_layers"], settings["full_attention_interval"])),
        rms_norm_eps=float(settings["rms_norm_eps"]),
        rope=Rope(
            theta=float(rope["theta"]),
            partial_rotary_factor=float(rope["partial_rotary_factor"]),
            head_dim=settings["head_dim"],
            # GLM-4.5 rotates one position per token (plain NeoX RoPE), no MRoPE sections.
            mrope_section=() if glm else tuple(rope["mrope_section"]),
            position_rows=not glm,
        ),
        context_length=settings["context_length"],
        tokens=TokenIds(bos=tokens["bos"], eos=tuple(eos) if isinstance(eos, list) else (eos,), pad=tokens["pad"]),
        linear_attention=None if glm else LinearAttentionDims(
            num_key_heads=lin["num_key_heads"],
            key_head_dim=lin["key_head_dim"],
            num_value_heads=lin["num_value_heads"],
            value_head_dim=lin["value_head_dim"],
            conv_kernel=lin["conv_kernel"],
        ),
        tie_word_embeddings=settings["tie_word_embeddings"],
        mtp_num_layers=settings["mtp_num_layers"],
        moe=moe,
        **(dict(head_layout=HeadLayout.TRAILING_LAYER, attention_output_gate=False,
                attention_bias=settings["attention_bias"], qk_norm=settings["qk_norm"]) if glm else {}),
    )
    return SyntheticSpec(
        architecture=architecture,
        full_attention_interval=settings["full_attention_interval"],
        norm_weight_scale=float(settings["norm_weight_scale"]),
        mtp_head=settings["mtp_head"],
    )


def _moe(family: str, sizes: dict) -> MoeDims | None:
    if family == "qwen35":
        return None
    moe = MoeDims(
        num_experts=sizes["num_experts"],
        top_k=sizes["top_k"],
        expert_intermediate_size=sizes["expert_intermediate_size"],
        shared_expert_intermediate_size=sizes["shared_expert_intermediate_size"],
    )
    if family != GLM:
        return moe
    return MoeDims(
        num_experts=moe.num_experts, top_k=moe.top_k, expert_intermediate_size=moe.expert_intermediate_size,
        shared_expert_intermediate_size=moe.shared_expert_intermediate_size,
        normalize_top_k=sizes["normalize_top_k"], shared_expert_sigmoid_gate=False, scoring=SIGMOID,
        selection_bias=True, num_groups=sizes["num_groups"], top_k_groups=sizes["top_k_groups"],
        routed_scaling_factor=float(sizes["routed_scaling_factor"]), dense_layers=sizes["dense_layers"],
    )
