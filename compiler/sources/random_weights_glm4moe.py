"""Seeded random weights for a GLM-4.5 architecture (`glm4moe`), in Hugging Face form and canonical form.

`raw_glm4moe_tensors` is the model as a `Glm4MoeForCausalLM` release stores it: `model.*` trunk
names, the routed experts one tensor per expert, `mlp.shared_experts.*`, plain RMSNorm scales, and
the MTP head as one more decoder layer `model.layers.{num_layers}.*` with `eh_proj`, `enorm`,
`hnorm` and `shared_head.norm`. `canonical_glm4moe_tensors` derives the canonical form on its own,
not through the HF source's name map, so tests comparing the two check something (as
`random_weights` does for Qwen3.5).

Draws as in `random_weights`: every tensor from an RNG seeded by `(seed, crc32(hf_name))`; linear
weights `N(0, 1/fan_in)`, biases `N(0, 0.1)`, norms `1 + N(0, norm_weight_scale)` (plain scales, so
a source that added 1 would change outputs), the router drawn wide (`N(0, 4/H)`) and the selection
bias `N(0, 0.1)`, about the spread of the scores it shifts, so it changes which experts are chosen.
"""

from __future__ import annotations

import numpy as np

from ..ir import Architecture
from ..weights import ArrayWeightStore
from .random_weights import linear_weight, rng, stack_experts, swiglu_weights

PREFIX = "model."
# The head's own tensors beside its decoder layer, HF name under `model.layers.{L}.` -> canonical.
HEAD_TENSORS = {
    "eh_proj.weight": "mtp.fc.weight",
    "enorm.weight": "mtp.pre_fc_norm_embedding.weight",
    "hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
    "shared_head.norm.weight": "mtp.norm.weight",
}


def _norm(name: str, seed: int, size: int, scale: float) -> np.ndarray:
    return (1.0 + scale * rng(seed, name).standard_normal(size)).astype(np.float32)


def _bias(name: str, seed: int, size: int) -> np.ndarray:
    return (0.1 * rng(seed, name).standard_normal(size)).astype(np.float32)


def _layer(p: str, arch: Architecture, seed: int, nscale: float, *, sparse: bool) -> dict[str, np.ndarray]:
    """One decoder layer under `p` (ending in "."): attention, norms, and the dense MLP or the MoE block."""
    h, nh, kvh, hd = arch.hidden_size, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    a = p + "self_attn."
    out = {
        p + "input_layernorm.weight": _norm(p + "input_layernorm.weight", seed, h, nscale),
        p + "post_attention_layernorm.weight": _norm(p + "post_attention_layernorm.weight", seed, h, nscale),
        a + "q_proj.weight": linear_weight(a + "q_proj.weight", seed, nh * hd, h),
        a + "k_proj.weight": linear_weight(a + "k_proj.weight", seed, kvh * hd, h),
        a + "v_proj.weight": linear_weight(a + "v_proj.weight", seed, kvh * hd, h),
        a + "o_proj.weight": linear_weight(a + "o_proj.weight", seed, h, nh * hd),
    }
    if arch.attention_bias:
        for proj, rows in (("q_proj", nh * hd), ("k_proj", kvh * hd), ("v_proj", kvh * hd)):
            out[f"{a}{proj}.bias"] = _bias(f"{a}{proj}.bias", seed, rows)
    if arch.qk_norm:
        out[a + "q_norm.weight"] = _norm(a + "q_norm.weight", seed, hd, nscale)
        out[a + "k_norm.weight"] = _norm(a + "k_norm.weight", seed, hd, nscale)
    m = p + "mlp."
    if not sparse:
        inter = arch.intermediate_size
        out.update(swiglu_weights(m, seed, inter, h))
        return out
    moe = arch.moe
    assert moe is not None
    i, s = moe.expert_intermediate_size, moe.shared_expert_intermediate_size
    out[m + "gate.weight"] = 2.0 * linear_weight(m + "gate.weight", seed, moe.num_experts, h)
    if moe.selection_bias:
        out[m + "gate.e_score_correction_bias"] = _bias(m + "gate.e_score_correction_bias", seed, moe.num_experts)
    for e in range(moe.num_experts):
        out.update(swiglu_weights(f"{m}experts.{e}.", seed, i, h))
    out.update(swiglu_weights(m + "shared_experts.", seed, s, h))
    return out


def raw_glm4moe_tensors(arch: Architecture, seed: int, *, norm_weight_scale: float = 0.1,
                        with_mtp: bool | None = None) -> dict[str, np.ndarray]:
    """The model's tensors as a Glm4MoeForCausalLM checkpoint stores them (float32); a tied model has no lm_head."""
    if with_mtp is None:
        with_mtp = arch.mtp_num_layers > 0
    h, v, s = arch.hidden_size, arch.vocab_size, norm_weight_scale
    out = {PREFIX + "embed_tokens.weight": rng(seed, PREFIX + "embed_tokens.weight").standard_normal((v, h)).astype(np.float32),
           PREFIX + "norm.weight": _norm(PREFIX + "norm.weight", seed, h, s)}
    if not arch.tie_word_embeddings:
        out["lm_head.weight"] = linear_weight("lm_head.weight", seed, v, h)
    for i in range(arch.num_layers):
        out.update(_layer(f"{PREFIX}layers.{i}.", arch, seed, s, sparse=arch.is_sparse(i)))
    if with_mtp:
        p = f"{PREFIX}layers.{arch.num_layers}."
        out.update(_layer(p, arch, seed, s, sparse=arch.moe is not None))
        out[p + "eh_proj.weight"] = linear_weight(p + "eh_proj.weight", seed, h, 2 * h)  # input [embedding | hidden]
        for norm in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
            out[p + norm] = _norm(p + norm, seed, h, s)
    return out


def canonical_glm4moe_tensors(arch: Architecture, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`raw` (as `raw_glm4moe_tensors` names them) under canonical names: the trailing layer becomes `mtp.*`."""
    head = f"{PREFIX}layers.{arch.num_layers}."
    out: dict[str, np.ndarray] = {}
    for hf_name, value in raw.items():
        if hf_name.startswith(head):
            local = hf_name[len(head):]
            name = HEAD_TENSORS.get(local)
            if name is None:
                name = "mtp.layers.0." + local
        else:
            name = hf_name.removeprefix(PREFIX)
        out[name.replace(".mlp.shared_experts.", ".mlp.shared_expert.")] = value
    if arch.tie_word_embeddings:
        out["lm_head.weight"] = out["embed_tokens.weight"]
    return stack_experts(out)


def seeded_glm4moe_store(arch: Architecture, seed: int, norm_weight_scale: float = 0.1, *,
                         with_mtp: bool | None = None) -> ArrayWeightStore:
    """Every canonical tensor of a GLM-4.5 `arch`, deterministic in `seed`."""
    raw = raw_glm4moe_tensors(arch, seed, norm_weight_scale=norm_weight_scale, with_mtp=with_mtp)
    return ArrayWeightStore(canonical_glm4moe_tensors(arch, raw))
