"""Hugging Face Nemotron-H checkpoints (`NemotronHForCausalLM`; Nemotron 3 Nano and Super): config.json and names.

The config keys are transformers 5.24's `NemotronHConfig`'s. Every layer is one residual sub-block
(`Architecture.separate_ffn_layers`), its kind in `layers_block_type` (`mamba` / `attention` / `moe` / `mlp`, or
transformers' own `linear_attention` / `full_attention`) or in the legacy `hybrid_override_pattern` (`M`, `*`,
`E`, `-`). Mamba2 layers (`ir/mamba.py`): `mamba_num_heads` x `mamba_head_dim`, `ssm_state_size`, `n_groups`,
`conv_kernel`, `use_conv_bias`; `time_step_limit` is read and must be the releases' `[0.0, Infinity]` (no clamp).
Attention has no positional encoding. MoE layers route as GLM's (`glm4moe.sigmoid_routing`: sigmoid scores, the
correction bias, `n_group` / `topk_group`, `norm_topk_prob`, `routed_scaling_factor`) over non-gated relu² experts
of `moe_intermediate_size`, plus one relu² shared expert of `moe_shared_expert_intermediate_size`;
`moe_latent_size` is Super's LatentMoE. Plain `mlp` layers are refused: no release with an MTP head has one.

Tensors: `backbone.*` (or `model.*`, transformers' in-memory prefix), `backbone.layers.N.norm` and
`backbone.layers.N.mixer.*`, routed experts one tensor per expert; norms are plain scales (no `1 + w`) and
`A_log` becomes `decay_scale = -exp(A_log)`. The MTP head (`num_nextn_predict_layers` 1, transformers drops
`mtp.*` on load) is two sub-blocks: `mtp.layers.0` (`enorm`, `hnorm`, `eh_proj`, `norm`, an attention mixer)
then `mtp.layers.1` (`norm`, a MoE mixer, `final_layernorm`). In order they are one pre-norm block, the
canonical head's: `mtp.layers.0.norm` its `input_layernorm`, `mtp.layers.1.norm` its
`post_attention_layernorm`, `mtp.layers.1.mixer` its `mlp`, `final_layernorm` its `mtp.norm` (an RMSNorm,
as vLLM's and TensorRT-LLM's `nemotron_h` MTP; docs/families/nemotron_h.md says why not llama.cpp's LayerNorm).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

from ...ir import Architecture, HeadLayout, LayerKind, Mamba2Dims, Rope
from ...ir.moe import RELU2
from .config import MAX_LAYERS, Config, _token_ids, attention_sizes
from .glm4moe import sigmoid_routing

ARCHITECTURES = ("NemotronHForCausalLM",)
FAMILY = "nemotron_h"
DECLARED_KEY = "num_nextn_predict_layers"
_KINDS = {"mamba": LayerKind.MAMBA2, "linear_attention": LayerKind.MAMBA2, "M": LayerKind.MAMBA2,
          "attention": LayerKind.FULL_ATTENTION, "full_attention": LayerKind.FULL_ATTENTION, "*": LayerKind.FULL_ATTENTION,
          "moe": LayerKind.FEED_FORWARD, "E": LayerKind.FEED_FORWARD}
_MLP = ("mlp", "-")
# The head's two sub-blocks as the one block they are, in canonical form.
_HEAD_KINDS = (LayerKind.FULL_ATTENTION, LayerKind.FEED_FORWARD)

# (HF local name under a layer, canonical local name): the mixer's tensors by what they are.
_MIXER = (
    ("norm.weight", "input_layernorm.weight"),
    ("mixer.A_log", "mamba.decay_scale"),
    *((f"mixer.{n}", f"mamba.{n}") for n in ("in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "D",
                                              "norm.weight", "out_proj.weight")),
    *((f"mixer.{n}_proj.weight", f"self_attn.{n}_proj.weight") for n in "qkvo"),
    ("mixer.shared_experts.", "mlp.shared_expert."),
    ("mixer.", "mlp."),  # gate, gate.e_score_correction_bias, experts.E.{up,down}_proj, fc{1,2}_latent_proj
)
# The head's tensors (HF name -> canonical); its mixers' other tensors follow `_MIXER` under `mtp.layers.0.`.
_HEAD = {
    "mtp.layers.0.enorm.weight": "mtp.pre_fc_norm_embedding.weight",
    "mtp.layers.0.hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
    "mtp.layers.0.eh_proj.weight": "mtp.fc.weight",
    "mtp.layers.0.norm.weight": "mtp.layers.0.input_layernorm.weight",
    "mtp.layers.1.norm.weight": "mtp.layers.0.post_attention_layernorm.weight",
    "mtp.layers.1.final_layernorm.weight": "mtp.norm.weight",
}
_TRUNK = {"embeddings.weight": "embed_tokens.weight", "norm_f.weight": "norm.weight"}
_LAYER = re.compile(r"^(?:backbone|model)\.layers\.(\d+)\.(.+)$")
_HEAD_LAYER = re.compile(r"^mtp\.layers\.(\d+)\.(.+)$")
_DECAY = "mamba.decay_scale"


def _local(local: str) -> str:
    for hf, canonical in _MIXER:
        if local == hf or (hf.endswith(".") and local.startswith(hf)):
            return canonical + local[len(hf):]
    return local


def _hf_local(canonical: str) -> str:
    for hf, local in _MIXER:
        if canonical == local or (local.endswith(".") and canonical.startswith(local)):
            return hf + canonical[len(local):]
    return canonical


class NemotronNames:
    """HF tensor names -> canonical, and back for messages."""

    optional_head: tuple[str, ...] = ()

    def canonical_name(self, hf_name: str) -> str | None:
        if hf_name == "lm_head.weight":
            return hf_name
        if hf_name in _HEAD:
            return _HEAD[hf_name]
        m = _HEAD_LAYER.match(hf_name)
        if m is not None:
            # Sub-block 0's mixer is the head block's attention, sub-block 1's its FFN; a further one is unknown.
            block, local = int(m[1]), m[2]
            if block > 1 or not local.startswith("mixer."):
                return f"mtp.layers.{block}.{local}"
            return "mtp.layers.0." + _local(local)
        m = _LAYER.match(hf_name)
        if m is not None:
            return f"layers.{m[1]}.{_local(m[2])}"
        for prefix in ("backbone.", "model."):
            if hf_name.startswith(prefix):
                return _TRUNK.get(hf_name[len(prefix):], hf_name[len(prefix):])
        return None

    def source_name(self, canonical: str) -> str:
        """The release's name of a canonical tensor (stacked experts as `experts.*.<proj>`)."""
        for hf, name in _HEAD.items():
            if canonical == name:
                return hf
        for local, name in _TRUNK.items():
            if canonical == name:
                return "backbone." + local
        stacked = lambda name: re.sub(r"(?<!shared_)experts\.(?=(up|down)_proj)", "experts.*.", name)  # noqa: E731
        if canonical.startswith("mtp.layers.0."):
            local = canonical.removeprefix("mtp.layers.0.")
            block = 0 if local.startswith("self_attn.") else 1
            return stacked(f"mtp.layers.{block}.{_hf_local(local)}")
        m = re.match(r"^layers\.(\d+)\.(.+)$", canonical)
        return stacked(f"backbone.layers.{m[1]}.{_hf_local(m[2])}") if m else canonical

    @staticmethod
    def to_canonical_value(canonical: str, raw):
        if canonical.endswith(_DECAY):
            import numpy as np

            return -np.exp(np.asarray(raw, dtype=np.float32))
        return raw

    @staticmethod
    def needs_conversion(canonical: str) -> bool:
        return canonical.endswith(_DECAY)

    @staticmethod
    def assembled(entries):
        return entries


def names(arch: Architecture, qwen_names) -> NemotronNames:
    return NemotronNames()


def declared_heads(cfg: Config, hf_names=()) -> tuple[str, int]:
    return f"config.json field {DECLARED_KEY}", cfg.int(DECLARED_KEY, 0)


def _kinds(cfg: Config, key: str, pattern_key: str) -> tuple[str, list | str | None]:
    """(the field, the list or pattern string) a config gives a layout in."""
    field, value = cfg.lookup(key)
    if value is None:
        field, value = cfg.lookup(pattern_key)
    return field, value


def _layer_kinds(cfg: Config) -> tuple[LayerKind, ...]:
    field, declared = _kinds(cfg, "layers_block_type", "hybrid_override_pattern")
    if declared is None:
        raise cfg.fail("layers_block_type", "is missing (required; or hybrid_override_pattern)")
    if not isinstance(declared, (list, str)) or not declared or len(declared) > MAX_LAYERS:
        raise cfg.fail(field, f"must be a non-empty list of layer types or a pattern string, not {declared!r}")
    kinds = []
    for i, kind in enumerate(declared):
        if kind in _MLP:
            raise cfg.fail(field, f"makes layer {i} a plain MLP ({kind!r}); mtpc builds Nemotron-H's MoE releases, "
                                  f"whose MTP head comes with no plain MLP layer")
        if kind not in _KINDS:
            raise cfg.fail(field, f"has unknown layer type {kind!r} at layer {i} (expected mamba, attention or moe)")
        kinds.append(_KINDS[kind])
    return tuple(kinds)


def _check_head_layout(cfg: Config) -> None:
    if cfg.int(DECLARED_KEY, 0) == 0:
        return
    field, declared = _kinds(cfg, "mtp_layers_block_type", "mtp_hybrid_override_pattern")
    if declared is None:  # transformers' default
        return
    kinds = tuple(_KINDS.get(k) for k in declared) if isinstance(declared, (list, str)) else None
    if kinds != _HEAD_KINDS:
        raise cfg.fail(field, f"is {declared!r}; mtpc builds the releases' head, an attention sub-block then a MoE one "
                              f"(['attention', 'moe'])")


def _mamba(cfg: Config) -> Mamba2Dims:
    def first(*keys: str, default=None) -> int:
        for key in keys:
            if cfg.lookup(key)[1] is not None:
                return cfg.int(key)
        if default is None:
            raise cfg.fail(keys[0], "is missing (required)")
        return default

    heads, groups = first("mamba_num_heads"), first("n_groups", "mamba_n_groups", default=8)
    if groups == 0 or heads % groups:
        raise cfg.fail("n_groups", f"({groups}) must divide mamba_num_heads ({heads})")
    for key, want in (("mamba_hidden_act", "silu"), ("mlp_hidden_act", "relu2")):
        field, value = cfg.lookup(key)
        if value not in (None, want):
            raise cfg.fail(field, f"is {value!r}; Nemotron-H's is {want!r}")
    for key in ("use_bias", "mamba_proj_bias", "attention_bias", "mlp_bias"):
        if cfg.flag(key, False):
            raise cfg.fail(key, "is true; Nemotron-H's projections have no bias")
    field, limit = cfg.lookup("time_step_limit")
    if limit is None:
        field, limit = cfg.lookup("mamba_dt_limit")
    if limit is not None and (not isinstance(limit, list) or len(limit) != 2 or [cfg.float(field, v) for v in limit] != [0.0, math.inf]):
        raise cfg.fail(field, f"is {limit!r}; mtpc does not clamp dt, as the releases' [0.0, Infinity] does not")
    conv_bias = cfg.flag("use_conv_bias", True) if cfg.lookup("use_conv_bias")[1] is not None else cfg.flag("mamba_conv_bias", True)
    return Mamba2Dims(num_heads=heads, head_dim=first("mamba_head_dim"), state_size=first("ssm_state_size", default=128),
                      num_groups=groups, conv_kernel=first("conv_kernel", "mamba_d_conv", default=4), conv_bias=conv_bias)


def architecture(cfg: Config, directory: Path) -> Architecture:
    kinds = _layer_kinds(cfg)
    _check_head_layout(cfg)
    hidden, heads, kv_heads, head_dim, _ = attention_sizes(_with_layers(cfg, len(kinds)))
    if cfg.int("n_shared_experts", 1) != 1:
        raise cfg.fail("n_shared_experts", "must be 1 (transformers and vLLM size a second shared expert differently)")
    latent = cfg.lookup("moe_latent_size")[1]
    moe = replace(sigmoid_routing(cfg), shared_expert_intermediate_size=cfg.int("moe_shared_expert_intermediate_size"),
                  expert_activation=RELU2, latent_size=0 if latent is None else cfg.int("moe_latent_size"))
    field, eps = cfg.lookup("layer_norm_epsilon")
    return Architecture(
        family=FAMILY,
        hidden_size=hidden,
        # No dense FFN: the experts' width stands in where one is shown.
        intermediate_size=moe.expert_intermediate_size,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=cfg.int("vocab_size"),
        layer_kinds=kinds,
        rms_norm_eps=1e-5 if eps is None else cfg.float(field, eps),
        # No positional encoding: nothing rotates (the graphs read no position).
        rope=Rope(10000.0, 0.0, head_dim, position_rows=False),
        context_length=cfg.int("max_position_embeddings"),
        tokens=_token_ids(cfg, directory),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", False),
        mtp_num_layers=cfg.int(DECLARED_KEY, 0),
        moe=moe,
        head_layout=HeadLayout.SUB_BLOCKS,
        attention_output_gate=False,
        qk_norm=False,
        mamba=_mamba(cfg) if LayerKind.MAMBA2 in kinds else None,
        separate_ffn_layers=True,
    )


def _with_layers(cfg: Config, num_layers: int) -> Config:
    """`cfg` with `num_hidden_layers` the layout's length (transformers derives it so, whatever the config says)."""
    return Config(cfg.path, {**cfg.doc, "num_hidden_layers": num_layers})
