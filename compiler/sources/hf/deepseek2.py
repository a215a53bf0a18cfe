"""Hugging Face multi-head latent attention checkpoints, the `deepseek2` family: GLM-4.7-Flash
(`Glm4MoeLiteForCausalLM`) and DeepSeek-V3 (`DeepseekV3ForCausalLM`, the config keys they share).

The config keys are transformers' `Glm4MoeLiteConfig` / `DeepseekV3Config` (models/glm4_moe_lite,
models/deepseek_v3): `q_lora_rank` (null: one `q_proj`), `kv_lora_rank`, `qk_nope_head_dim`,
`qk_rope_head_dim`, `v_head_dim`; GLM-4.5's routing (sigmoid scores plus `e_score_correction_bias`,
`topk_method: noaux_tc`, `n_group` / `topk_group`, `routed_scaling_factor`, `norm_topk_prob`, shared
experts). Traps read here on purpose:

- `head_dim` is an alias of `qk_rope_head_dim` in these configs (transformers' `attribute_map`), not a head
  size: it is never read. The package's `head_dim` is the cached latent's width (`ir/mla.py`).
- `q_a_layernorm` / `kv_a_layernorm` are built with transformers' default eps 1e-6, not `rms_norm_eps`.
- `rope_interleave` missing means true (the default of both configs): the rope rows of `q_b_proj` (per
  head) and of `kv_a_proj_with_mqa` are then permuted on read into the canonical half-split order.
- The dense layers: the release's `first_k_dense_replace` and transformers' `mlp_layer_types` are both
  read and must agree; a pattern other than a leading run of dense layers is refused at its field.
- `num_key_value_heads` is the decompressed form's (= heads); an MLA package caches one latent head.

The MTP layer is GLM-4.5's trailing decoder layer (`glm4moe.GlmNames`: `eh_proj`, `enorm`, `hnorm`,
`shared_head.norm`, optional `embed_tokens` / `shared_head.head` copies) with an MLA block.

DeepSeek-V3's own features: `rope_and_scale` reads yarn RoPE (`yarn.py`: the frequencies, the cos/sin
factor and the softmax's mscale^2, from different keys), and `refuse_quantized` lets FP8 blocks through
(`quant_method: fp8`, read as float32 by `fp8.py` with their `weight_scale_inv`), refusing other schemes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...ir import Architecture, HeadLayout, LayerKind, MlaDims, Rope
from . import glm4moe
from ...util.lazy_import import lazy_module
from .config import Config, _token_ids, attention_sizes
from .yarn import read_yarn

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # read when a weight is: describing the checkpoint needs none

ARCHITECTURES = ("Glm4MoeLiteForCausalLM", "DeepseekV3ForCausalLM")
FAMILY = "deepseek2"
# transformers' default for the latent norms (`Glm4MoeLiteRMSNorm(q_lora_rank)`, no eps given).
LATENT_NORM_EPS = 1e-6
# transformers' defaults where a config leaves the dense layers unsaid.
_DEFAULT_DENSE = {"Glm4MoeLiteForCausalLM": 1, "DeepseekV3ForCausalLM": 3}


def interleave_to_half_split(rope_dim: int) -> np.ndarray:
    """Row order taking interleaved rope pairs `(x0, x1), (x2, x3), ...` to half-split `[x0, x2, .. | x1, x3, ..]`:
    transformers' `apply_rotary_pos_emb_interleave` rotates pair j by frequency j and emits this order."""
    return np.concatenate([np.arange(0, rope_dim, 2), np.arange(1, rope_dim, 2)])


_Q_ROWS = ("self_attn.q_b_proj.weight", "self_attn.q_proj.weight")
_KV_A_ROWS = "self_attn.kv_a_proj_with_mqa.weight"


def rope_rows(canonical: str, heads: int, mla: MlaDims) -> np.ndarray | None:
    """The row permutation of a weight whose rows hold rope channels (None: no rope rows)."""
    if not canonical.endswith((*_Q_ROWS, _KV_A_ROWS)):
        return None
    perm = interleave_to_half_split(mla.qk_rope_head_dim)
    if canonical.endswith(_Q_ROWS):
        per_head = np.concatenate([np.arange(mla.qk_nope_head_dim), mla.qk_nope_head_dim + perm])
        return (np.arange(heads)[:, None] * mla.qk_head_dim + per_head[None, :]).reshape(-1)
    return np.concatenate([np.arange(mla.kv_lora_rank), mla.kv_lora_rank + perm])


class MlaNames(glm4moe.GlmNames):
    """GLM-4.5's names (trailing-layer head) plus the rope rows put in half-split order when the source interleaves."""

    def __init__(self, num_layers: int, heads: int, mla: MlaDims, interleaved: bool):
        super().__init__(num_layers)
        self.heads, self.mla, self.interleaved = heads, mla, interleaved

    def needs_conversion(self, canonical: str) -> bool:  # type: ignore[override]
        return self.interleaved and canonical.endswith((*_Q_ROWS, _KV_A_ROWS))  # no numpy: describe uses this

    def to_canonical_value(self, canonical: str, raw):  # type: ignore[override]
        rows = rope_rows(canonical, self.heads, self.mla) if self.interleaved else None
        return raw if rows is None else np.asarray(raw, dtype=np.float32)[rows]


def names(arch: Architecture, qwen_names) -> MlaNames:
    assert arch.mla is not None
    return MlaNames(arch.num_layers, arch.num_attention_heads, arch.mla, arch.mla.source_rope_interleaved)


declared_heads = glm4moe.declared_heads


def architecture(cfg: Config, directory: Path) -> Architecture:
    refuse_quantized(cfg)
    hidden, heads, _kv_heads, _alias, num_layers = attention_sizes(cfg)  # `head_dim` is the rope dim: not read
    if cfg.flag("attention_bias", False):
        raise cfg.fail("attention_bias", "is true; mtpc builds MLA without projection biases (neither GLM-4.7-Flash "
                                         "nor DeepSeek-V3 has them)")
    nope, rd, r, vd = (cfg.int(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank", "v_head_dim"))
    for key, value in (("qk_rope_head_dim", rd), ("kv_lora_rank", r), ("v_head_dim", vd)):
        if value == 0:
            raise cfg.fail(key, "must be positive")
    if rd % 2:
        raise cfg.fail("qk_rope_head_dim", f"({rd}) must be even (RoPE rotates channel pairs)")
    field, q_lora = cfg.lookup("q_lora_rank")
    q_lora_rank = None if q_lora is None else cfg.int("q_lora_rank")
    if q_lora_rank == 0:
        raise cfg.fail(field, "is 0; give null for a model without a query LoRA")
    rope, scale = rope_and_scale(cfg, rd, nope + rd)
    mla = MlaDims(kv_lora_rank=r, qk_nope_head_dim=nope, qk_rope_head_dim=rd, v_head_dim=vd, softmax_scale=scale,
                  q_lora_rank=q_lora_rank, latent_norm_eps=LATENT_NORM_EPS,
                  source_rope_interleaved=cfg.flag("rope_interleave", True))
    moe = replace(_routing(cfg), dense_layers=dense_layers(cfg, num_layers))
    field, eps = cfg.lookup("rms_norm_eps")
    return Architecture(
        family=FAMILY,
        hidden_size=hidden,
        intermediate_size=cfg.int("intermediate_size", 0 if moe.dense_layers == 0 else None),
        num_attention_heads=heads,
        num_key_value_heads=1,  # the latent, one head for all (`ir/mla.py`)
        head_dim=mla.latent_dim,
        vocab_size=cfg.int("vocab_size"),
        layer_kinds=(LayerKind.FULL_ATTENTION,) * num_layers,
        rms_norm_eps=1e-6 if eps is None else cfg.float(field, eps),
        rope=rope,
        context_length=cfg.int("max_position_embeddings"),
        tokens=_token_ids(cfg, directory),
        tie_word_embeddings=cfg.flag("tie_word_embeddings", False),
        mtp_num_layers=declared_heads(cfg)[1],
        moe=moe,
        head_layout=HeadLayout.TRAILING_LAYER,
        attention_output_gate=False,
        attention_bias=False,
        qk_norm=False,
        mla=mla,
    )


def refuse_quantized(cfg: Config) -> None:
    """Quantized releases other than DeepSeek-V3's FP8 blocks (`fp8.py` reads those, checking their block size)."""
    field, quant = cfg.lookup("quantization_config")
    if quant is not None:
        method = quant.get("quant_method") if isinstance(quant, dict) else quant
        if method != "fp8":
            raise cfg.fail(field, f"declares {method!r} weights; mtpc reads float (F32 / F16 / BF16) MLA checkpoints "
                                  "and FP8 blocks (quant_method fp8) only")


def rope_and_scale(cfg: Config, rope_dim: int, qk_head_dim: int) -> tuple[Rope, float]:
    """(RoPE over all `rope_dim` rope channels at one position per token, the softmax scale `qk_head_dim ** -0.5`,
    both as yarn scales them when the config says so: DeepSeek-V3)."""
    _, params = cfg.lookup("rope_parameters")
    if params is None:
        _, params = cfg.lookup("rope_scaling")
    params = params or {}
    where = "rope_parameters" if cfg.lookup("rope_parameters")[1] is not None else "rope_scaling"
    if not isinstance(params, dict):
        raise cfg.fail(where, "must be an object")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ("default", "yarn"):
        raise cfg.fail(f"{where}.rope_type", f"{rope_type!r} is not supported (default or yarn RoPE)")
    if "rope_theta" in params:
        theta = cfg.float(f"{where}.rope_theta", params["rope_theta"])
    else:
        field, value = cfg.lookup("rope_theta")
        if value is None:
            raise cfg.fail("rope_theta", "is missing (required; or rope_parameters.rope_theta)")
        theta = cfg.float(field, value)
    # transformers would rotate head_dim (= qk_rope_head_dim) x factor channels of qk_rope_head_dim: only 1 fits.
    for field, value in ((f"{where}.partial_rotary_factor", params.get("partial_rotary_factor")),
                         cfg.lookup("partial_rotary_factor")):
        if value is not None and cfg.float(field, value) != 1.0:
            raise cfg.fail(field, f"is {value!r}; MLA rotates all qk_rope_head_dim channels (1.0)")
    yarn, softmax_mscale = read_yarn(cfg, where, params) if rope_type == "yarn" else (None, 1.0)
    return Rope(theta, 1.0, rope_dim, position_rows=False, yarn=yarn), qk_head_dim**-0.5 * softmax_mscale


def dense_layers(cfg: Config, num_layers: int) -> int:
    """The leading run of dense layers, from `first_k_dense_replace` and `mlp_layer_types` (both read, agreeing)."""
    found: list[tuple[str, int]] = []
    field, k = cfg.lookup("first_k_dense_replace")
    if k is not None:
        k = cfg.int("first_k_dense_replace")
        if k > num_layers:
            raise cfg.fail(field, f"({k}) is more than num_hidden_layers ({num_layers})")
        found.append((field, k))
    field, types = cfg.lookup("mlp_layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers or any(t not in ("dense", "sparse") for t in types):
            raise cfg.fail(field, f"must list \"dense\" or \"sparse\" for each of the {num_layers} layers")
        run = next((i for i, t in enumerate(types) if t != "dense"), num_layers)
        if any(t == "dense" for t in types[run:]):
            raise cfg.fail(field, f"has dense layers after sparse ones ({types!r}); mtpc builds a leading run of "
                                  "dense layers")
        found.append((field, run))
    field, freq = cfg.lookup("moe_layer_freq")
    if freq not in (None, 1):
        raise cfg.fail(field, f"is {freq!r}; mtpc builds every layer after the dense ones sparse (1)")
    if len(found) == 2 and found[0][1] != found[1][1]:
        raise cfg.fail(found[1][0], f"makes the first {found[1][1]} layer(s) dense, {found[0][0]} says {found[0][1]}")
    if found:
        return found[0][1]
    archs = cfg.doc.get("architectures") or []
    return next((_DEFAULT_DENSE[a] for a in archs if a in _DEFAULT_DENSE), 1)


def _routing(cfg: Config):
    """GLM-4.5's sigmoid, bias-corrected, group-limited routing (DeepSeek-V3's `noaux_tc`); others refused."""
    field, scoring = cfg.lookup("scoring_func")
    if scoring not in (None, "sigmoid"):
        raise cfg.fail(field, f"is {scoring!r}; mtpc routes MLA models by sigmoid scores (noaux_tc)")
    field, method = cfg.lookup("topk_method")
    if method not in (None, "noaux_tc"):
        raise cfg.fail(field, f"is {method!r}; mtpc routes MLA models by noaux_tc (sigmoid + e_score_correction_bias)")
    return glm4moe.sigmoid_routing(cfg)  # its groups, experts and shared experts checked there
