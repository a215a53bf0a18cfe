"""Hugging Face Step-3.5-Flash checkpoints (`Step3p5ForCausalLM`, family `step35`): config.json and tensor names.

The config keys are the release's legacy ones, read as transformers 5.24's `Step3p7TextConfig` maps them
(models/step3p7): `num_attention_groups` (KV heads), `attention_other_setting.num_attention_heads` (the sliding
layers' query heads; its `num_attention_groups` / `head_dim` must equal the model's, as transformers keeps them),
`sliding_window`, per-layer `layer_types`, `rope_theta` (a number or a list) and `partial_rotary_factors` (one
value per layer kind: transformers takes each kind's from its first layer, so a list that varies within a kind
is refused), `moe_layers_enum` (the sparse layers: a trailing run here), `moe_num_experts` / `moe_top_k` /
`moe_intermediate_size` / `share_expert_dim`, `moe_router_scaling_factor`, `swiglu_limits` /
`swiglu_limits_shared`. The per-layer lists are padded with the MTP layers' entries (`num_nextn_predict_layers`),
which give the MTP layers their kind (sliding), FFN (dense) and clamps.

Tensors: norms are zero-centred (`Step3p7RMSNorm` scales by 1 + w; canonical holds 1 + w); `self_attn.g_proj`
`[heads, hidden]` is the sigmoid gate per head; a sparse layer stores `moe.gate.weight` (router),
`moe.router_bias` (the selection bias), `moe.{gate,up,down}_proj.weight` stacked `[E, out, in]` (or one tensor
per expert, `moe.experts.{e}.*`) and the shared expert `share_expert.*`. The MTP layers are appended,
`model.layers.{L + k}`: a decoder layer (sliding attention, dense MLP) plus `eh_proj`, `enorm`, `hnorm` and its
own `transformer.shared_head.{norm,output}`. The first is the package's head (`mtp.*`, its own LM head
`mtp.lm_head.weight`); the others are read as `mtp.heads.{k}.*` and left unused: onnxruntime-genai drives one head
graph (`Architecture.mtp_chained_layers`). The head is seeded before the trunk's final norm and hands its own
pre-norm output on, as the model's authors serve it (vLLM's `step3p5.py` returns the trunk's hidden states
before `model.norm`, `compute_logits` applies it; `step3p5_mtp.py` returns the MTP block's output before
`shared_head.norm`), and as llama.cpp's `step35.cpp` does.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ...ir import (Architecture, HeadLayout, LayerAttention, LayerKind, MoeDims, Rope, SeedHidden, SwigluLimits)
from ...ir.moe import SIGMOID
from ...weights import canonical_shapes
from . import glm4moe
from .config import Config, _token_ids, attention_sizes

ARCHITECTURES = ("Step3p5ForCausalLM",)
FAMILY = "step35"
_KINDS = {k.value: k for k in (LayerKind.FULL_ATTENTION, LayerKind.SLIDING_ATTENTION)}
# A trunk or MTP layer's local HF names -> canonical local names (the rest keep theirs).
_LOCAL = ((re.compile(r"^moe\.gate\.weight$"), "mlp.gate.weight"),
          (re.compile(r"^moe\.router_bias$"), "mlp.gate.e_score_correction_bias"),
          (re.compile(r"^moe\.experts\.(\d+)\.(gate|up|down)_proj\.weight$"), r"mlp.experts.\1.\2_proj.weight"),
          (re.compile(r"^moe\.(gate|up|down)_proj\.weight$"), r"mlp.experts.\1_proj.weight"),
          (re.compile(r"^share_expert\.(gate|up|down)_proj\.weight$"), r"mlp.shared_expert.\1_proj.weight"))
# An MTP layer's own tensors beside its decoder layer (HF local name -> canonical, under `mtp.`).
HEAD_TENSORS = {"eh_proj.weight": "fc.weight", "enorm.weight": "pre_fc_norm_embedding.weight",
                "hnorm.weight": "pre_fc_norm_hidden.weight", "transformer.shared_head.norm.weight": "norm.weight",
                "transformer.shared_head.output.weight": "lm_head.weight",
                # A copy of the trunk's embedding some exports keep: served, never read.
                "transformer.embed_tokens.weight": "embed_tokens.weight"}
_ZERO_CENTRED = ("norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight")


def _local(name: str) -> str:
    for pattern, replacement in _LOCAL:
        if pattern.match(name):
            return pattern.sub(replacement, name)
    return name


class StepNames:
    """HF tensor names -> canonical, for a trunk of `num_layers` layers and `chained` MTP layers."""

    def __init__(self, arch: Architecture):
        self.num_layers = arch.num_layers
        self.chained = max(arch.mtp_chained_layers, arch.mtp_num_layers)
        one_head = [n for n in canonical_shapes(replace(arch, mtp_num_layers=1)) if n.startswith("mtp.")]
        # The later chained layers and the first's embedding copy: known, served, unused.
        self.optional_head = tuple(["mtp.embed_tokens.weight"]
                                   + [f"mtp.heads.{k}.{n.removeprefix('mtp.')}" for k in range(1, self.chained)
                                      for n in [*one_head, "mtp.embed_tokens.weight"]])

    def canonical_name(self, hf_name: str) -> str | None:
        split = glm4moe.split_layer_name(hf_name)
        if not isinstance(split, tuple):
            return split
        layer, local = split
        if layer < self.num_layers:
            return f"layers.{layer}.{_local(local)}"
        head = "mtp." if layer == self.num_layers else f"mtp.heads.{layer - self.num_layers}."
        if local in HEAD_TENSORS:
            return head + HEAD_TENSORS[local]
        return f"{head}layers.0.{_local(local)}"

    def source_name(self, canonical: str) -> str:
        """The HF name of a tensor, for messages (experts stacked as the release stores them)."""
        if canonical == "lm_head.weight":
            return canonical
        m = re.match(r"^mtp\.(?:heads\.(\d+)\.)?(.+)$", canonical)
        if m is None:
            prefix, rest = "model.", canonical
        else:
            prefix, rest = f"model.layers.{self.num_layers + int(m[1] or 0)}.", m[2]
            for local, name in HEAD_TENSORS.items():
                if rest == name:
                    return prefix + local
            rest = rest.removeprefix("layers.0.")
        for pattern, hf in ((r"mlp\.gate\.weight$", "moe.gate.weight"),
                            (r"mlp\.gate\.e_score_correction_bias$", "moe.router_bias"),
                            (r"mlp\.experts\.(gate|up|down)_proj\.weight$", r"moe.\1_proj.weight"),
                            (r"mlp\.shared_expert\.", "share_expert.")):
            rest = re.sub(pattern, hf, rest)
        return prefix + rest

    @staticmethod
    def needs_conversion(canonical: str) -> bool:
        return canonical.endswith(_ZERO_CENTRED)

    @classmethod
    def to_canonical_value(cls, canonical: str, raw):
        if not cls.needs_conversion(canonical):
            return raw
        import numpy as np

        return np.asarray(raw, dtype=np.float32) + np.float32(1.0)  # Step3p7RMSNorm's 1 + w

    @staticmethod
    def assembled(entries):
        return entries


def declared_heads(cfg: Config, hf_names=()) -> tuple[str, int]:
    """(where, how many the package builds): the first of the declared MTP layers (GLM-4.5's keys)."""
    where, declared = glm4moe.declared_heads(cfg, hf_names)
    return where, min(declared, 1)


def names(arch: Architecture, qwen_names) -> StepNames:
    return StepNames(arch)


def _per_layer(cfg: Config, key: str, count: int, padded: int, default=None) -> list:
    """`key`'s list over the trunk and the MTP layers (`padded` entries; a list of `count` covers the trunk alone,
    the MTP layers then get `default`), or `default` everywhere when absent."""
    field, value = cfg.lookup(key)
    if value is None:
        return [default] * padded
    if not isinstance(value, list):
        return [value] * padded
    if len(value) not in (count, padded):
        raise cfg.fail(field, f"lists {len(value)} entries; expected one per layer ({count}, or {padded} with the "
                              "MTP layers)")
    return list(value) + [default] * (padded - len(value))


def _one_per_kind(cfg: Config, key: str, values: list, kinds: list[LayerKind]) -> dict[LayerKind, float]:
    """The value of each layer kind in a per-layer list, where every layer of the kind agrees."""
    out: dict[LayerKind, float] = {}
    for i, (value, kind) in enumerate(zip(values, kinds)):
        if value is None:
            continue
        number = cfg.float(cfg.text_prefix + key, value)
        if out.setdefault(kind, number) != number:
            raise cfg.fail(cfg.text_prefix + key, f"gives {kind.value} layers {out[kind]:g} and {number:g} (layer {i}); "
                                                  "transformers takes each kind's from its first layer, mtpc one per kind")
    return out


def _moe(cfg: Config, num_layers: int, padded: int) -> MoeDims:
    field, enum = cfg.lookup("moe_layers_enum")
    if enum is None:  # transformers' default: every layer from the fourth on, MTP layers included
        sparse = set(range(3, padded))
    else:
        items = enum.split(",") if isinstance(enum, str) else enum
        try:
            sparse = {int(str(i).strip()) for i in items if str(i).strip()}
        except (TypeError, ValueError):
            raise cfg.fail(field, f"must list layer indices, not {enum!r}") from None
    trunk = sorted(i for i in sparse if i < num_layers)
    dense = trunk[0] if trunk else num_layers
    if trunk != list(range(dense, num_layers)):
        raise cfg.fail(field, f"makes layers {trunk} sparse; mtpc builds a leading run of dense layers, then sparse ones")
    mtp = {i in sparse for i in range(num_layers, padded)}
    if len(mtp) > 1:
        raise cfg.fail(field, "makes some MTP layers sparse and others dense")
    for key, expected in (("moe_router_activation", "sigmoid"), ("norm_expert_weight", True)):
        field_, value = cfg.lookup(key)
        if value not in (None, expected):
            raise cfg.fail(field_, f"is {value!r}; Step3p7's router is sigmoid-scored with renormalized weights")
    experts, top_k = cfg.int("moe_num_experts"), cfg.int("moe_top_k")
    if experts == 0 or not 0 < top_k <= experts:
        raise cfg.fail(cfg.text_prefix + "moe_top_k", f"({top_k}) must be between 1 and moe_num_experts ({experts})")
    field_, scaling = cfg.lookup("moe_router_scaling_factor")
    return MoeDims(num_experts=experts, top_k=top_k, expert_intermediate_size=cfg.int("moe_intermediate_size"),
                   shared_expert_intermediate_size=cfg.int("share_expert_dim"), normalize_top_k=True,
                   shared_expert_sigmoid_gate=False, scoring=SIGMOID,
                   selection_bias=cfg.flag("use_moe_router_bias", True),
                   routed_scaling_factor=1.0 if scaling is None else cfg.float(field_, scaling), dense_layers=dense,
                   sparse_mtp=bool(mtp and mtp.pop()))


def _limits(cfg: Config, key: str, count: int, padded: int) -> tuple[float, ...]:
    values = _per_layer(cfg, key, count, padded, 0.0)
    return tuple(0.0 if v is None else cfg.float(cfg.text_prefix + key, v) for v in values)


def architecture(cfg: Config, directory: Path) -> Architecture:
    hidden, heads, _, head_dim, num_layers = attention_sizes(cfg)
    kv_heads = cfg.int("num_attention_groups", cfg.int("num_key_value_heads", heads))
    if kv_heads == 0 or heads % kv_heads:
        raise cfg.fail(cfg.text_prefix + "num_attention_groups", f"({kv_heads}) must divide num_attention_heads ({heads})")
    chained = glm4moe.declared_heads(cfg)[1]
    padded = num_layers + chained
    field, types = cfg.lookup("layer_types")
    if not isinstance(types, list) or len(types) not in (num_layers, padded) or any(t not in _KINDS for t in types):
        raise cfg.fail(field, f"must list full_attention or sliding_attention for each of the {num_layers} layers and "
                              f"the {chained} MTP layers")
    if chained and len(types) == num_layers:
        raise cfg.fail(field, f"lists no entry for the {chained} MTP layers (the release pads it to {padded}): their "
                              "attention kind is unknown")
    kinds = [_KINDS[t] for t in types]
    for key, expected in (("use_head_wise_attn_gate", True), ("use_qk_norm", True), ("use_bidirectional_attention", False)):
        field_, value = cfg.lookup(key)
        if value not in (None, expected):
            raise cfg.fail(field_, f"is {value!r}; Step3p7's attention is {'not ' * (not expected)}{key.removeprefix('use_')}")
    field_, scalar = cfg.lookup("query_pre_attn_scalar")
    if scalar not in (None, head_dim):
        raise cfg.fail(field_, f"is {scalar!r}; mtpc scales scores by head_dim ({head_dim}) ** -0.5")
    field_, scaling = cfg.lookup("rope_scaling")
    if scaling:
        raise cfg.fail(field_, f"is {scaling!r}; only unscaled RoPE is supported for Step-3.5")
    thetas = _one_per_kind(cfg, "rope_theta", _per_layer(cfg, "rope_theta", num_layers, padded), kinds)
    factors = _one_per_kind(cfg, "partial_rotary_factors", _per_layer(cfg, "partial_rotary_factors", num_layers, padded),
                            kinds)
    ropes = {}
    for kind in set(kinds):
        if kind not in thetas:
            raise cfg.fail(cfg.text_prefix + "rope_theta", f"gives {kind.value} layers no theta")
        rope = Rope(thetas[kind], factors.get(kind, 1.0), head_dim, position_rows=False)
        if not 0 < rope.rotary_dim <= head_dim or rope.rotary_dim % 2:
            raise cfg.fail(cfg.text_prefix + "partial_rotary_factors", f"gives {kind.value} layers rotary dim "
                                                                       f"{rope.rotary_dim} of head_dim {head_dim}")
        ropes[kind] = rope
    other_field, other = cfg.lookup("attention_other_setting")
    other = other or {}
    if not isinstance(other, dict):
        raise cfg.fail(other_field, "must be an object")
    for key, same in (("num_attention_groups", kv_heads), ("head_dim", head_dim)):
        if other.get(key, same) != same:
            raise cfg.fail(f"{other_field}.{key}", f"is {other[key]!r}; transformers gives sliding layers the model's "
                                                   f"{same} (and llama.cpp the setting's): they must agree")
    sliding = None
    window = None
    if LayerKind.SLIDING_ATTENTION in kinds:
        window = cfg.int("sliding_window")
        if window == 0:
            raise cfg.fail(cfg.text_prefix + "sliding_window", "must be positive")
        sliding_heads = other.get("num_attention_heads", heads)
        if not isinstance(sliding_heads, int) or isinstance(sliding_heads, bool) or sliding_heads <= 0 or sliding_heads % kv_heads:
            raise cfg.fail(f"{other_field}.num_attention_heads", f"({sliding_heads!r}) must be a multiple of the {kv_heads} KV heads")
        sliding = LayerAttention(sliding_heads, kv_heads, head_dim, head_dim, ropes[LayerKind.SLIDING_ATTENTION],
                                 window=window)
    moe = _moe(cfg, num_layers, padded)
    field_, eps = cfg.lookup("rms_norm_eps")
    full_rope = ropes.get(LayerKind.FULL_ATTENTION) or ropes[LayerKind.SLIDING_ATTENTION]
    return Architecture(
        family=FAMILY, hidden_size=hidden, intermediate_size=cfg.int("intermediate_size"),
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim, vocab_size=cfg.int("vocab_size"),
        layer_kinds=tuple(kinds[:num_layers]), rms_norm_eps=1e-5 if eps is None else cfg.float(field_, eps),
        rope=full_rope, context_length=cfg.int("max_position_embeddings"), tokens=_token_ids(cfg, directory),
        sliding_window=window, tie_word_embeddings=cfg.flag("tie_word_embeddings", False), moe=moe,
        mtp_num_layers=min(chained, 1), head_layout=HeadLayout.TRAILING_LAYER, attention_output_gate=False,
        attention_bias=False, qk_norm=True, attention_head_gate=True, sliding_attention=sliding,
        mtp_layer_kind=kinds[num_layers] if chained else LayerKind.FULL_ATTENTION,
        mtp_chained_layers=chained, mtp_own_lm_head=True, mtp_seed_hidden=SeedHidden.PRE_NORM,
        swiglu_limits=SwigluLimits(_limits(cfg, "swiglu_limits", num_layers, padded),
                                   _limits(cfg, "swiglu_limits_shared", num_layers, padded)),
    )
