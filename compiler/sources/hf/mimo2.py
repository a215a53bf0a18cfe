"""Hugging Face MiMo-V2-Flash checkpoints (`MiMoV2FlashForCausalLM`, family `mimo2`): config.json and tensor names.

The release's config keys, as its authors' serving code reads them (vLLM `models/mimo_v2_flash.py` / `mimo_v2_mtp.py`,
SGLang `models/mimo_v2_flash.py`); transformers 5.24 (`models/mimo_v2_flash`) hard-codes most of them and ignores
`hybrid_layer_pattern`, the `swa_*` and the rope keys, so they are read here:

- `hybrid_layer_pattern` (one 0 / 1 per trunk layer: 1 slides); the MTP layers slide (vLLM's `MiMoV2MTPLayer`);
- full layers: `num_attention_heads`, `num_key_value_heads`, `head_dim` (q/k), `v_head_dim`, `rope_theta`; sliding
  layers: `swa_num_attention_heads`, `swa_num_key_value_heads` (twice the full layers' in the release),
  `swa_head_dim`, `swa_v_head_dim`, `swa_rope_theta`, and a sink logit per query head where
  `add_swa_attention_sink_bias` (`self_attn.attention_sink_bias`; `add_full_attention_sink_bias` is refused);
  `partial_rotary_factor` for both (rotary dim int(head_dim * factor), transformers' and llama.cpp's);
- the window: `sliding_window_size` counts the tokens **before** the query; the authors' SGLang attends to those
  and the query (its attention's `sliding_window_size` is the window's left extent: its models with an HF
  `sliding_window` pass `hf_sliding_window_to_window_left(sliding_window)`, MiMo's passes `sliding_window_size`
  as is; transformers' `MiMoV2FlashConfig` sets its window to `sliding_window_size + 1` for that reason),
  so W = `sliding_window_size` + 1. vLLM passes `sliding_window_size` as its inclusive window, one token fewer; a
  release without `sliding_window_size` gives `sliding_window` in transformers' (inclusive) sense;
- `attention_value_scale`: values times it before the attention (`Architecture.attention_value_scale`);
- `moe_layer_freq` (one 0 / 1 per layer: a leading run of dense layers), `n_routed_experts`,
  `num_experts_per_tok`, `moe_intermediate_size`, sigmoid scores with `e_score_correction_bias`
  (`scoring_func`, `topk_method: noaux_tc`), `n_group` / `topk_group`, `norm_topk_prob`, `routed_scaling_factor`
  (null: 1); no shared expert;
- `layernorm_epsilon` (transformers' `rms_norm_eps`).

Tensors: `self_attn.attention_sink_bias` is canonical `self_attn.sinks`; experts one tensor per expert
(`mlp.experts.{e}.*`). The MTP layers `model.mtp.layers.{k}.*` (the config does not count them; the release ships 3)
each hold `enorm`, `hnorm`, `eh_proj` (`[enorm(embed) | hnorm(h)]`), a sliding decoder layer whose second norm is
`pre_mlp_layernorm`, a dense MLP and `final_layernorm`; the LM head is the trunk's. The first is the package's head
(`mtp.*`), the others are read as `mtp.heads.{k}.*` and left unused (`Architecture.mtp_chained_layers`, as vLLM's
`mimo_v2_mtp.py`, which also builds the first alone). The head is seeded with the trunk's hidden state after its
final norm and hands on its own `final_layernorm` output: vLLM's `MiMoV2Model.forward` returns `norm(h)` and its
MTP layer `final_layernorm(h)` (llama.cpp's mimo2.cpp seeds before the norm: another convention).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ...ir import Architecture, HeadLayout, LayerAttention, LayerKind, MoeDims, Rope, SeedHidden
from ...ir.moe import SIGMOID
from ...weights import canonical_shapes
from .config import Config, _token_ids, attention_sizes

ARCHITECTURES = ("MiMoV2FlashForCausalLM",)
FAMILY = "mimo2"
# The release ships three MTP layers and no key counting them (llama.cpp's conversion/mimo.py hard-codes 3 too).
RELEASED_MTP_LAYERS = 3
_TRUNK = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_MTP = re.compile(r"^model\.mtp\.layers\.(\d+)\.(.+)$")
# An MTP layer's own tensors beside its decoder layer (HF local name -> canonical, under `mtp.`).
HEAD_TENSORS = {"eh_proj.weight": "fc.weight", "enorm.weight": "pre_fc_norm_embedding.weight",
                "hnorm.weight": "pre_fc_norm_hidden.weight", "final_layernorm.weight": "norm.weight"}
# HF local names that differ from the canonical ones (both ways).
_LOCAL = {"self_attn.attention_sink_bias": "self_attn.sinks", "pre_mlp_layernorm.weight": "post_attention_layernorm.weight"}


class MimoNames:
    """HF tensor names -> canonical, for a trunk of `num_layers` layers and `chained` MTP layers."""

    def __init__(self, arch: Architecture):
        self.num_layers = arch.num_layers
        chained = max(arch.mtp_chained_layers, arch.mtp_num_layers)
        one_head = [n for n in canonical_shapes(replace(arch, mtp_num_layers=1)) if n.startswith("mtp.")]
        self.optional_head = tuple(f"mtp.heads.{k}.{n.removeprefix('mtp.')}" for k in range(1, chained) for n in one_head)

    def canonical_name(self, hf_name: str) -> str | None:
        if hf_name == "lm_head.weight":
            return hf_name
        m = _TRUNK.match(hf_name)
        if m is not None:
            local = m[2] if m[2] != "self_attn.attention_sink_bias" else "self_attn.sinks"
            return f"layers.{m[1]}.{local}"
        m = _MTP.match(hf_name)
        if m is not None:
            head = "mtp." if m[1] == "0" else f"mtp.heads.{m[1]}."
            return head + HEAD_TENSORS[m[2]] if m[2] in HEAD_TENSORS else f"{head}layers.0.{_LOCAL.get(m[2], m[2])}"
        return hf_name.removeprefix("model.") if hf_name.startswith("model.") else None

    def source_name(self, canonical: str) -> str:
        """The HF name of a tensor, for messages (stacked experts as `experts.*.<proj>`)."""
        if canonical == "lm_head.weight":
            return canonical
        m = re.match(r"^mtp\.(?:heads\.(\d+)\.)?(.+)$", canonical)
        if m is None:
            prefix, rest = "model.", canonical
        else:
            prefix, rest = f"model.mtp.layers.{int(m[1] or 0)}.", m[2]
            for local, name in HEAD_TENSORS.items():
                if rest == name:
                    return prefix + local
            rest = rest.removeprefix("layers.0.")
            for local, name in _LOCAL.items():
                rest = rest.replace(name, local)
        rest = re.sub(r"mlp\.experts\.(?!\d)", "mlp.experts.*.", rest.replace("self_attn.sinks", "self_attn.attention_sink_bias"))
        return prefix + rest

    @staticmethod
    def needs_conversion(canonical: str) -> bool:
        return False

    @staticmethod
    def to_canonical_value(canonical: str, raw):
        return raw

    @staticmethod
    def assembled(entries):
        return entries


def declared_heads(cfg: Config, hf_names=()) -> tuple[str, int]:
    """(where, how many the package builds): the first of the `model.mtp.layers.{k}` the release holds."""
    layers = {int(m[1]) for n in hf_names for m in [_MTP.match(n)] if m}
    return "its model.mtp.layers.* tensors", min(len(layers), 1)


def names(arch: Architecture, qwen_names) -> MimoNames:
    return MimoNames(arch)


def _pattern(cfg: Config, key: str, num_layers: int) -> list[int]:
    field, value = cfg.lookup(key)
    if not isinstance(value, list) or len(value) != num_layers or any(v not in (0, 1) or isinstance(v, bool) for v in value):
        raise cfg.fail(field, f"must list 0 or 1 for each of the {num_layers} layers")
    return value


def _moe(cfg: Config, num_layers: int) -> MoeDims:
    field, freq = cfg.lookup("moe_layer_freq")
    sparse = _pattern(cfg, "moe_layer_freq", num_layers) if freq is not None else [1] * num_layers
    dense = sparse.index(1) if 1 in sparse else num_layers
    if sparse != [0] * dense + [1] * (num_layers - dense):
        raise cfg.fail(field, f"is {sparse}; mtpc builds a leading run of dense layers, then sparse ones")
    for key, expected in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc")):
        field_, value = cfg.lookup(key)
        if value not in (None, expected):
            raise cfg.fail(field_, f"is {value!r}; MiMo-V2-Flash's router is {expected}")
    field_, shared = cfg.lookup("n_shared_experts")
    if shared:
        raise cfg.fail(field_, f"is {shared!r}; MiMo-V2-Flash's sparse layers have no shared expert")
    experts, top_k = cfg.int("n_routed_experts"), cfg.int("num_experts_per_tok")
    if experts == 0 or not 0 < top_k <= experts:
        raise cfg.fail(cfg.text_prefix + "num_experts_per_tok", f"({top_k}) must be between 1 and n_routed_experts ({experts})")
    groups, top_groups = cfg.int("n_group", 1), cfg.int("topk_group", 1)
    if groups == 0 or experts % groups or not 0 < top_groups <= groups:
        raise cfg.fail(cfg.text_prefix + "n_group", f"({groups}) must divide n_routed_experts ({experts}), topk_group "
                                                    f"({top_groups}) at most it")
    field_, scaling = cfg.lookup("routed_scaling_factor")
    return MoeDims(num_experts=experts, top_k=top_k, expert_intermediate_size=cfg.int("moe_intermediate_size"),
                   shared_expert_intermediate_size=0, normalize_top_k=cfg.flag("norm_topk_prob", True),
                   shared_expert_sigmoid_gate=False, scoring=SIGMOID, selection_bias=True, num_groups=groups,
                   top_k_groups=top_groups, routed_scaling_factor=1.0 if scaling is None else cfg.float(field_, scaling),
                   dense_layers=dense, sparse_mtp=False)


def _rope(cfg: Config, key: str, head_dim: int) -> Rope:
    field, theta = cfg.lookup(key)
    if theta is None:
        raise cfg.fail(cfg.text_prefix + key, "is missing (required)")
    factor_field, factor = cfg.lookup("partial_rotary_factor")
    rope = Rope(cfg.float(field, theta), 1.0 if factor is None else cfg.float(factor_field, factor), head_dim,
                position_rows=False)
    if not 0 < rope.rotary_dim <= head_dim or rope.rotary_dim % 2:
        raise cfg.fail(factor_field, f"gives rotary dim {rope.rotary_dim} of head_dim {head_dim}")
    return rope


def _window(cfg: Config) -> int:
    field, before = cfg.lookup("sliding_window_size")
    if before is not None:
        return cfg.int("sliding_window_size") + 1  # the tokens before the query, and the query (SGLang's)
    window = cfg.int("sliding_window")
    if window == 0:
        raise cfg.fail(cfg.text_prefix + "sliding_window", "must be positive")
    return window


def architecture(cfg: Config, directory: Path) -> Architecture:
    hidden, heads, kv_heads, head_dim, num_layers = attention_sizes(cfg)
    value_dim = cfg.int("v_head_dim", head_dim)
    if value_dim > head_dim:
        raise cfg.fail(cfg.text_prefix + "v_head_dim", f"({value_dim}) is wider than head_dim ({head_dim})")
    pattern = _pattern(cfg, "hybrid_layer_pattern", num_layers)
    kinds = tuple(LayerKind.SLIDING_ATTENTION if p else LayerKind.FULL_ATTENTION for p in pattern)
    field, full_sinks = cfg.lookup("add_full_attention_sink_bias")
    if full_sinks:
        raise cfg.fail(field, "is true; mtpc gives sinks to sliding layers only, as the release does")
    if cfg.flag("attention_bias", False):
        raise cfg.fail(cfg.text_prefix + "attention_bias", "is true; MiMo-V2-Flash's projections have no bias")
    if cfg.lookup("rope_scaling")[1]:
        raise cfg.fail(cfg.text_prefix + "rope_scaling", "is set; only unscaled RoPE is supported for MiMo-V2-Flash")
    for key, same in (("swa_head_dim", head_dim), ("swa_v_head_dim", value_dim)):
        if cfg.int(key, same) != same:
            raise cfg.fail(cfg.text_prefix + key, f"({cfg.int(key)}) differs from the full layers' {same}; mtpc caches "
                                                  "one head width per model, as llama.cpp's converter asserts")
    sliding_heads, sliding_kv = cfg.int("swa_num_attention_heads", heads), cfg.int("swa_num_key_value_heads", kv_heads)
    if sliding_kv == 0 or sliding_heads % sliding_kv:
        raise cfg.fail(cfg.text_prefix + "swa_num_key_value_heads",
                       f"({sliding_kv}) must divide swa_num_attention_heads ({sliding_heads})")
    window = _window(cfg)
    sliding = LayerAttention(sliding_heads, sliding_kv, head_dim, value_dim, _rope(cfg, "swa_rope_theta", head_dim),
                             window=window, sinks=cfg.flag("add_swa_attention_sink_bias", False))
    field, scale = cfg.lookup("attention_value_scale")
    field_, eps = cfg.lookup("layernorm_epsilon")
    if eps is None:
        field_, eps = cfg.lookup("rms_norm_eps")
    return Architecture(
        family=FAMILY, hidden_size=hidden, intermediate_size=cfg.int("intermediate_size"), num_attention_heads=heads,
        num_key_value_heads=kv_heads, head_dim=head_dim, vocab_size=cfg.int("vocab_size"), layer_kinds=kinds,
        rms_norm_eps=1e-5 if eps is None else cfg.float(field_, eps), rope=_rope(cfg, "rope_theta", head_dim),
        context_length=cfg.int("max_position_embeddings"), tokens=_token_ids(cfg, directory), sliding_window=window,
        tie_word_embeddings=cfg.flag("tie_word_embeddings", False), moe=_moe(cfg, num_layers), mtp_num_layers=1,
        head_layout=HeadLayout.MTP_MODULE, attention_output_gate=False, attention_bias=False, qk_norm=False, sliding_attention=sliding,
        value_head_dim=value_dim if value_dim != head_dim else None, mtp_layer_kind=LayerKind.SLIDING_ATTENTION,
        mtp_chained_layers=RELEASED_MTP_LAYERS, mtp_seed_hidden=SeedHidden.POST_NORM,
        attention_value_scale=1.0 if scale is None else cfg.float(field, scale),
    )
