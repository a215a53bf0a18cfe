"""Seeded random weights for a Qwen3.5 architecture, in Hugging Face form and canonical form.

`raw_hf_tensors` is the model as a Hugging Face checkpoint would store it (HF names,
zero-centred offset norms, `A_log`); `seeded_store` is the same model under
canonical names and conventions (`mtpc.weights`). The canonical form is derived
here, on its own, not through the HF source's converter: tests compare the HF
source's store with `seeded_store`, and that check is only worth something if the
two conversions are written apart.

Every tensor draws from an RNG seeded by `(seed, crc32(hf_name))`, so a tensor's
values do not depend on which other tensors exist or the order they are made in.
Scales keep activations O(1) over a few layers: linear weights are
`N(0, 1/fan_in)`, embeddings `N(0, 1)`, offset norms `N(0, norm_weight_scale)`
(effective scale `1 + w`, so forgetting or doubling the `+1` changes outputs).
"""

from __future__ import annotations

import zlib

import numpy as np

from ..ir import Architecture, LayerKind
from ..weights import ArrayWeightStore

TEXT_PREFIX = "model.language_model."
# Zero-centred RMSNorm weights (effective scale 1 + w), by the HF module that owns them; the
# GatedDeltaNet gated norm (`linear_attn.norm`) is an ordinary scale and is not listed.
_OFFSET_NORM_MODULES = frozenset(
    (
        "input_layernorm",
        "post_attention_layernorm",
        "q_norm",
        "k_norm",
        "norm",
        "pre_fc_norm_embedding",
        "pre_fc_norm_hidden",
    )
)


def rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])


def linear_weight(name: str, seed: int, out_features: int, in_features: int) -> np.ndarray:
    w = rng(seed, name).standard_normal((out_features, in_features)) / np.sqrt(in_features)
    return w.astype(np.float32)



def swiglu_weights(prefix: str, seed: int, intermediate: int, hidden: int) -> dict[str, np.ndarray]:
    """A SwiGLU MLP's gate, up and down projections under `prefix` (an expert, a shared expert or a dense MLP)."""
    return {
        prefix + "gate_proj.weight": linear_weight(prefix + "gate_proj.weight", seed, intermediate, hidden),
        prefix + "up_proj.weight": linear_weight(prefix + "up_proj.weight", seed, intermediate, hidden),
        prefix + "down_proj.weight": linear_weight(prefix + "down_proj.weight", seed, hidden, intermediate),
    }

def _offset_norm(name: str, seed: int, size: int, scale: float) -> np.ndarray:
    return (scale * rng(seed, name).standard_normal(size)).astype(np.float32)


def _attention_layer(prefix: str, arch: Architecture, seed: int, nscale: float) -> dict[str, np.ndarray]:
    h, nh, kvh, hd = arch.hidden_size, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    p = prefix + "self_attn."
    return {
        p + "q_proj.weight": linear_weight(p + "q_proj.weight", seed, 2 * nh * hd, h),  # per head [query | gate]
        p + "k_proj.weight": linear_weight(p + "k_proj.weight", seed, kvh * hd, h),
        p + "v_proj.weight": linear_weight(p + "v_proj.weight", seed, kvh * hd, h),
        p + "o_proj.weight": linear_weight(p + "o_proj.weight", seed, h, nh * hd),
        p + "q_norm.weight": _offset_norm(p + "q_norm.weight", seed, hd, nscale),
        p + "k_norm.weight": _offset_norm(p + "k_norm.weight", seed, hd, nscale),
    }


def _linear_attention_layer(prefix: str, arch: Architecture, seed: int, nscale: float) -> dict[str, np.ndarray]:
    la = arch.linear_attention
    if la is None:
        raise ValueError("architecture has linear-attention layers but no linear_attention dims")
    h = arch.hidden_size
    p = prefix + "linear_attn."
    conv = rng(seed, p + "conv1d.weight").standard_normal((la.conv_dim, 1, la.conv_kernel)) / np.sqrt(la.conv_kernel)
    # A_log spread so decays span short and long memories: -exp(A_log) in [-1, -0.05].
    a_log = np.log(rng(seed, p + "A_log").uniform(0.05, 1.0, la.num_value_heads))
    gated_norm = 1.0 + nscale * rng(seed, p + "norm.weight").standard_normal(la.value_head_dim)
    return {
        p + "in_proj_qkv.weight": linear_weight(p + "in_proj_qkv.weight", seed, la.conv_dim, h),
        p + "in_proj_z.weight": linear_weight(p + "in_proj_z.weight", seed, la.value_dim, h),
        p + "in_proj_b.weight": linear_weight(p + "in_proj_b.weight", seed, la.num_value_heads, h),
        p + "in_proj_a.weight": linear_weight(p + "in_proj_a.weight", seed, la.num_value_heads, h),
        p + "conv1d.weight": conv.astype(np.float32),
        p + "dt_bias": (0.5 * rng(seed, p + "dt_bias").standard_normal(la.num_value_heads)).astype(np.float32),
        p + "A_log": a_log.astype(np.float32),
        p + "norm.weight": gated_norm.astype(np.float32),  # not offset form: weights near 1
        p + "out_proj.weight": linear_weight(p + "out_proj.weight", seed, h, la.value_dim),
    }


def _mlp_and_norms(prefix: str, arch: Architecture, seed: int, nscale: float, layer: int | None) -> dict[str, np.ndarray]:
    h, inter = arch.hidden_size, arch.intermediate_size
    out = {
        prefix + "input_layernorm.weight": _offset_norm(prefix + "input_layernorm.weight", seed, h, nscale),
        prefix + "post_attention_layernorm.weight": _offset_norm(
            prefix + "post_attention_layernorm.weight", seed, h, nscale
        ),
    }
    if arch.is_sparse(layer):  # a MoE family's leading dense layers (`moe.dense_layers`) have the MLP
        out.update(_sparse_moe(prefix + "mlp.", arch, seed))
        return out
    out.update(swiglu_weights(prefix + "mlp.", seed, inter, h))
    return out


def _sparse_moe(p: str, arch: Architecture, seed: int) -> dict[str, np.ndarray]:
    """A MoE FFN one tensor per expert, as transformers saves it. The router is drawn wide (N(0, 4/H))
    so tokens prefer different experts by clear margins."""
    moe = arch.moe
    assert moe is not None
    h, i, s = arch.hidden_size, moe.expert_intermediate_size, moe.shared_expert_intermediate_size
    out = {p + "gate.weight": 2.0 * linear_weight(p + "gate.weight", seed, moe.num_experts, h)}
    for e in range(moe.num_experts):
        out.update(swiglu_weights(f"{p}experts.{e}.", seed, i, h))
    out.update(swiglu_weights(p + "shared_expert.", seed, s, h))
    out[p + "shared_expert_gate.weight"] = linear_weight(p + "shared_expert_gate.weight", seed, 1, h)
    return out


def raw_hf_tensors(
    arch: Architecture, seed: int, *, norm_weight_scale: float = 0.1, with_mtp: bool | None = None
) -> dict[str, np.ndarray]:
    """The model's tensors as a Qwen3_5ForConditionalGeneration checkpoint stores them (float32).

    `with_mtp` defaults to whether the architecture declares MTP layers. A tied
    model has no `lm_head.weight`, as in real tied checkpoints.
    """
    if with_mtp is None:
        with_mtp = arch.mtp_num_layers > 0
    h, v = arch.hidden_size, arch.vocab_size
    s = norm_weight_scale
    out: dict[str, np.ndarray] = {}
    embed = TEXT_PREFIX + "embed_tokens.weight"
    out[embed] = rng(seed, embed).standard_normal((v, h)).astype(np.float32)
    out[TEXT_PREFIX + "norm.weight"] = _offset_norm(TEXT_PREFIX + "norm.weight", seed, h, s)
    if not arch.tie_word_embeddings:
        out["lm_head.weight"] = linear_weight("lm_head.weight", seed, v, h)
    for i, kind in enumerate(arch.layer_kinds):
        prefix = f"{TEXT_PREFIX}layers.{i}."
        if kind is LayerKind.LINEAR_ATTENTION:
            out.update(_linear_attention_layer(prefix, arch, seed, s))
        elif kind is LayerKind.FULL_ATTENTION:
            out.update(_attention_layer(prefix, arch, seed, s))
        else:
            raise ValueError(f"no random weights for layer kind {kind.value}")
        out.update(_mlp_and_norms(prefix, arch, seed, s, i))
    if with_mtp:
        for j in range(max(arch.mtp_num_layers, 1)):
            prefix = f"mtp.layers.{j}."
            out.update(_attention_layer(prefix, arch, seed, s))
            out.update(_mlp_and_norms(prefix, arch, seed, s, None))
        out["mtp.fc.weight"] = linear_weight("mtp.fc.weight", seed, h, 2 * h)  # input [embedding | hidden]
        for norm in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"):
            out[norm] = _offset_norm(norm, seed, h, s)
    return out


def canonical_tensors(arch: Architecture, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`raw` (as `raw_hf_tensors` names them) under canonical names and conventions."""
    out: dict[str, np.ndarray] = {}
    for hf_name, value in raw.items():
        name = hf_name[len(TEXT_PREFIX) :] if hf_name.startswith(TEXT_PREFIX) else hf_name
        *owner, leaf = name.split(".")
        if leaf == "A_log":
            out[".".join(owner + ["decay_scale"])] = -np.exp(value.astype(np.float32))
        elif leaf == "weight" and owner[-1] in _OFFSET_NORM_MODULES and owner[-2:] != ["linear_attn", "norm"]:
            out[name] = value.astype(np.float32) + np.float32(1.0)
        else:
            out[name] = value
    if arch.tie_word_embeddings:
        out["lm_head.weight"] = out["embed_tokens.weight"]
    return stack_experts(out)


def stack_experts(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`mlp.experts.<e>.<proj>.weight` tensors stacked into canonical `mlp.experts.<proj>.weight` `[E, ...]`."""
    out: dict[str, np.ndarray] = {}
    stacks: dict[str, dict[int, np.ndarray]] = {}
    for name, value in tensors.items():
        parts = name.split(".")
        if len(parts) > 4 and parts[-4] == "experts" and parts[-3].isdigit():
            stacks.setdefault(".".join(parts[:-3] + parts[-2:]), {})[int(parts[-3])] = value
        else:
            out[name] = value
    for name, by_expert in stacks.items():
        out[name] = np.stack([by_expert[e] for e in range(len(by_expert))])
    return out


def seeded_store(
    arch: Architecture, seed: int, norm_weight_scale: float = 0.1, *, with_mtp: bool | None = None
) -> ArrayWeightStore:
    """Every canonical tensor of a Qwen3.5 `arch`, deterministic in `seed`."""
    raw = raw_hf_tensors(arch, seed, norm_weight_scale=norm_weight_scale, with_mtp=with_mtp)
    return ArrayWeightStore(canonical_tensors(arch, raw))
