"""Hugging Face GLM-4.5 / 4.6 / 4.7 checkpoints (`Glm4MoeForCausalLM`): config.json and tensor names.

The config keys are transformers' `Glm4MoeConfig`'s (models/glm4_moe, since 4.54): GQA attention with
`attention_bias` and `use_qk_norm`, partial NeoX RoPE (`partial_rotary_factor`, default 0.5, top
level or in `rope_parameters`), `head_dim` stated (GLM-4.5-Air's is not hidden / heads), the first
`first_k_dense_replace` layers dense, the others routed by sigmoid scores with
`e_score_correction_bias` (`n_group`, `topk_group`, `norm_topk_prob`, `routed_scaling_factor`) plus
`n_shared_experts` ungated shared experts of `moe_intermediate_size` each.

The MTP head is one more decoder layer after the trunk, `model.layers.{num_hidden_layers}.*`
(`num_nextn_predict_layers` of them; transformers drops them on load): `eh_proj` applied to
`[enorm(embed(t+1)), hnorm(h_t)]`, a sparse decoder layer, `shared_head.norm`. Its
`embed_tokens` / `shared_head.head` are copies of the trunk's that GLM-4.5 stores and GLM-4.6 does
not: both are optional, and the trunk's are used either way (as transformers' MTP drafter does).
RMSNorm weights are plain scales, so no tensor is converted on read.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ...ir import Architecture, HeadLayout, LayerKind, MoeDims
from ...ir.moe import SIGMOID
from .config import Config, _rope, _token_ids, attention_sizes

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
# The head's own tensors beside its decoder layer (local name -> canonical).
HEAD_TENSORS = {
    "eh_proj.weight": "mtp.fc.weight",
    "enorm.weight": "mtp.pre_fc_norm_embedding.weight",
    "hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
    "shared_head.norm.weight": "mtp.norm.weight",
    # Copies of the trunk's some releases store: served, never read (the trunk's stand in).
    "embed_tokens.weight": "mtp.embed_tokens.weight",
    "shared_head.head.weight": "mtp.lm_head.weight",
}
OPTIONAL_HEAD = ("mtp.embed_tokens.weight", "mtp.lm_head.weight")
ARCHITECTURES = ("Glm4MoeForCausalLM",)  # GLM-4.5 / 4.6 / 4.7
FAMILY = "glm4moe"
DECLARED_KEYS = ("num_nextn_predict_layers", "num_mtp_layers")


def split_layer_name(hf_name: str) -> tuple[int, str] | str | None:
    """A trailing-layer release's HF name: (layer, local name) inside `model.layers.*`, else its canonical name
    (None: not the text model's)."""
    if hf_name == "lm_head.weight":
        return hf_name
    if not hf_name.startswith("model."):
        return None
    m = _LAYER.match(hf_name)
    return hf_name.removeprefix("model.") if m is None else (int(m[1]), m[2])


class GlmNames:
    """HF tensor names -> canonical, for a trunk of `num_layers` layers."""

    optional_head = OPTIONAL_HEAD

    def __init__(self, num_layers: int):
        self.num_layers = num_layers

    def canonical_name(self, hf_name: str) -> str | None:
        split = split_layer_name(hf_name)
        if not isinstance(split, tuple):
            return split
        layer, local = split[0], split[1].replace("mlp.shared_experts.", "mlp.shared_expert.")
        if layer < self.num_layers:
            return f"layers.{layer}.{local}"
        block = layer - self.num_layers
        if block == 0 and local in HEAD_TENSORS:
            return HEAD_TENSORS[local]
        return f"mtp.layers.{block}.{local}"

    def source_name(self, canonical: str) -> str:
        """The HF name of a head tensor, for messages (stacked experts as `experts.*.<proj>`)."""
        for local, name in HEAD_TENSORS.items():
            if canonical == name:
                return f"model.layers.{self.num_layers}.{local}"
        m = re.match(r"^mtp\.layers\.(\d+)\.(.+)$", canonical)
        if m is None:
            return canonical
        local = re.sub(r"mlp\.experts\.(?!\d)", "mlp.experts.*.", m[2].replace("mlp.shared_expert.", "mlp.shared_experts."))
        return f"model.layers.{self.num_layers + int(m[1])}.{local}"

    @staticmethod
    def to_canonical_value(canonical: str, raw):
        return raw

    @staticmethod
    def needs_conversion(canonical: str) -> bool:
        return False

    @staticmethod
    def assembled(entries):
        return entries


def declared_heads(cfg: Config, hf_names=()) -> tuple[str, int]:
    """(where, how many): MTP layers the config declares (0 when it says nothing)."""
    for key in DECLARED_KEYS:
        field, value = cfg.lookup(key)
        if value is not None:
            return f"config.json field {field}", cfg.int(key)
    return f"config.json field {DECLARED_KEYS[0]}", 0


def names(arch: Architecture, qwen_names) -> "GlmNames":
    return GlmNames(arch.num_layers)


def architecture(cfg: Config, directory: Path) -> Architecture:
    hidden, heads, kv_heads, head_dim, num_layers = attention_sizes(cfg)
    moe = _moe(cfg, num_layers)
    field, eps = cfg.lookup("rms_norm_eps")
    return Architecture(
        family=FAMILY,
        hidden_size=hidden,
        intermediate_size=cfg.int("intermediate_size", 0 if moe.dense_layers == 0 else None),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=cfg.int("vocab_size"),
        layer_kinds=(LayerKind.FULL_ATTENTION,) * num_layers,
        rms_norm_eps=1e-5 if eps is None else cfg.float(field, eps),
        rope=_rope(cfg, head_dim, 0.5, position_rows=False),
        context_length=cfg.int("max_position_embeddings"),
        tokens=_token_ids(cfg, directory),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", False),
        mtp_num_layers=declared_heads(cfg)[1],
        moe=moe,
        head_layout=HeadLayout.TRAILING_LAYER,
        attention_output_gate=False,
        attention_bias=cfg.flag("attention_bias", False),
        qk_norm=cfg.flag("use_qk_norm", False),
    )


def _moe(cfg: Config, num_layers: int) -> MoeDims:
    dense = cfg.int("first_k_dense_replace", 1)
    if dense > num_layers:
        raise cfg.fail("first_k_dense_replace", f"({dense}) is more than num_hidden_layers ({num_layers})")
    return replace(sigmoid_routing(cfg), dense_layers=dense)


def sigmoid_routing(cfg: Config) -> MoeDims:
    """GLM's sparse block without its dense layers (the caller's): sigmoid scores with the selection bias, groups,
    scaling, shared experts (DeepSeek-V3's `noaux_tc`, which the deepseek2 family reads too)."""
    experts = cfg.int("n_routed_experts")
    top_k = cfg.int("num_experts_per_tok")
    groups, kept = cfg.int("n_group", 1), cfg.int("topk_group", 1)
    if experts == 0 or groups == 0 or experts % groups:
        raise cfg.fail("n_group", f"({groups}) must divide n_routed_experts ({experts})")
    if not 0 < kept <= groups:
        raise cfg.fail("topk_group", f"({kept}) must be between 1 and n_group ({groups})")
    if groups > 1 and experts // groups < 2:
        raise cfg.fail("n_group", f"({groups}) leaves fewer than 2 experts per group (a group scores its two best)")
    if not 0 < top_k <= kept * (experts // groups):
        raise cfg.fail("num_experts_per_tok", f"({top_k}) must be between 1 and the experts of topk_group groups "
                                              f"({kept} x {experts // groups})")
    expert_size = cfg.int("moe_intermediate_size")
    if cfg.int("n_shared_experts", 1) == 0:
        raise cfg.fail("n_shared_experts", "is 0; mtpc builds GLM's sparse block with its shared expert")
    field, scaling = cfg.lookup("routed_scaling_factor")
    return MoeDims(
        num_experts=experts,
        top_k=top_k,
        expert_intermediate_size=expert_size,
        shared_expert_intermediate_size=expert_size * cfg.int("n_shared_experts", 1),
        normalize_top_k=cfg.flag("norm_topk_prob", True),
        shared_expert_sigmoid_gate=False,
        scoring=SIGMOID,
        selection_bias=True,
        num_groups=groups,
        top_k_groups=kept,
        routed_scaling_factor=1.0 if scaling is None else cfg.float(field, scaling),
    )
