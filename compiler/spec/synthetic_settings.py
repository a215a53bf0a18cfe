"""`source.synthetic` (schema defaults filled in) -> the typed `SyntheticSpec` a synthetic source builds."""

from __future__ import annotations

from ..ir import Architecture, LinearAttentionDims, MoeDims, Rope, SyntheticSpec, TokenIds, hybrid_layer_kinds


def synthetic_spec(settings: dict) -> SyntheticSpec:
    lin, rope, tokens = settings["linear_attention"], settings["rope"], settings["tokens"]
    eos = tokens["eos"]
    moe = None
    if settings["architecture"] == "qwen35moe":
        sizes = settings["moe"]
        moe = MoeDims(
            num_experts=sizes["num_experts"],
            top_k=sizes["top_k"],
            expert_intermediate_size=sizes["expert_intermediate_size"],
            shared_expert_intermediate_size=sizes["shared_expert_intermediate_size"],
        )
    architecture = Architecture(
        family=settings["architecture"],
        hidden_size=settings["hidden_size"],
        intermediate_size=settings["intermediate_size"] if moe is None else moe.expert_intermediate_size,
        num_attention_heads=settings["num_attention_heads"],
        num_key_value_heads=settings["num_key_value_heads"],
        head_dim=settings["head_dim"],
        vocab_size=settings["vocab_size"],
        layer_kinds=hybrid_layer_kinds(settings["num_layers"], settings["full_attention_interval"]),
        rms_norm_eps=float(settings["rms_norm_eps"]),
        rope=Rope(
            theta=float(rope["theta"]),
            partial_rotary_factor=float(rope["partial_rotary_factor"]),
            head_dim=settings["head_dim"],
            mrope_section=tuple(rope["mrope_section"]),
        ),
        context_length=settings["context_length"],
        tokens=TokenIds(bos=tokens["bos"], eos=tuple(eos) if isinstance(eos, list) else (eos,), pad=tokens["pad"]),
        linear_attention=LinearAttentionDims(
            num_key_heads=lin["num_key_heads"],
            key_head_dim=lin["key_head_dim"],
            num_value_heads=lin["num_value_heads"],
            value_head_dim=lin["value_head_dim"],
            conv_kernel=lin["conv_kernel"],
        ),
        tie_word_embeddings=settings["tie_word_embeddings"],
        mtp_num_layers=settings["mtp_num_layers"],
        moe=moe,
    )
    return SyntheticSpec(
        architecture=architecture,
        full_attention_interval=settings["full_attention_interval"],
        norm_weight_scale=float(settings["norm_weight_scale"]),
    )
