"""A Qwen3.5 or GLM-4.5 checkpoint made up from a seed: the model lowering put in `SourceRef.synthetic`, weights
seeded random (`random_weights`, `random_weights_glm4moe`), the MTP head too unless `mtp_head: fitted` fits it to
the main model (`fitted_head`)."""

from __future__ import annotations

from ..util.diagnostics import Diagnostic, ExitCode, MtpcError
from ..ir import MoeDims, SourceRef, SourceTensor, SyntheticSpec
from ..weights import WeightStore, canonical_shapes
from .info import SourceInfo


def problems(spec: SyntheticSpec) -> list[tuple[tuple[str, ...], str]]:
    """Sizes that do not make the model, as (path inside `source.synthetic`, message)."""
    arch = spec.architecture
    out: list[tuple[tuple[str, ...], str]] = []
    heads, kv_heads = arch.num_attention_heads, arch.num_key_value_heads
    if arch.moe is not None and arch.moe.top_k > arch.moe.num_experts:
        out.append((("moe", "top_k"), f"top_k ({arch.moe.top_k}) must be at most num_experts ({arch.moe.num_experts})"))
    elif arch.moe is not None:
        out += _routing_problems(arch.moe, arch.num_layers)
    if heads % kv_heads:
        out.append((("num_key_value_heads",), f"num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})"))
    lin = arch.linear_attention
    if lin is not None and lin.num_value_heads % lin.num_key_heads:
        out.append(
            (
                ("linear_attention", "num_value_heads"),
                f"num_value_heads ({lin.num_value_heads}) must be a multiple of num_key_heads ({lin.num_key_heads})",
            )
        )
    rope, head_dim = arch.rope, arch.head_dim
    rotary = head_dim * rope.partial_rotary_factor
    if abs(rotary - round(rotary)) > 1e-9 or round(rotary) % 2:
        out.append(
            (
                ("rope", "partial_rotary_factor"),
                f"head_dim * partial_rotary_factor = {head_dim} * {rope.partial_rotary_factor:g} = {rotary:g}"
                " must be an even whole number (the rotary width)",
            )
        )
    elif rope.mrope_section and sum(rope.mrope_section) != round(rotary) // 2:
        out.append(
            (
                ("rope", "mrope_section"),
                f"mrope_section must add up to half the rotary width ({round(rotary) // 2}), not {sum(rope.mrope_section)}",
            )
        )
    if lin is not None and spec.full_attention_interval > arch.num_layers:
        out.append(
            (
                ("full_attention_interval",),
                f"full_attention_interval ({spec.full_attention_interval}) is larger than num_layers"
                f" ({arch.num_layers}), so no layer would be full attention",
            )
        )
    if spec.mtp_head == "fitted" and (arch.family != "qwen35" or arch.mtp_num_layers != 1):
        out.append((("mtp_head",), "mtp_head: fitted fits the one MTP layer of a dense Qwen3.5 (architecture: qwen35, "
                                   f"mtp_num_layers: 1), not architecture: {arch.family} with {arch.mtp_num_layers} MTP layers"))
    tokens, vocab = arch.tokens, arch.vocab_size
    for name, ids in (("bos", (tokens.bos,)), ("eos", tokens.eos), ("pad", (tokens.pad,))):
        if any(i >= vocab for i in ids):
            out.append((("tokens", name), f"token id {max(ids)} is outside the vocabulary (vocab_size {vocab})"))
    return out


def _routing_problems(moe: MoeDims, num_layers: int) -> list[tuple[tuple[str, ...], str]]:
    """Group-limited routing that cannot choose top_k experts, and dense layers past the trunk."""
    out: list[tuple[tuple[str, ...], str]] = []
    groups = moe.num_groups
    if moe.num_experts % groups:
        out.append((("moe", "num_groups"), f"num_groups ({groups}) must divide num_experts ({moe.num_experts})"))
    elif moe.top_k_groups > groups:
        out.append((("moe", "top_k_groups"), f"top_k_groups ({moe.top_k_groups}) must be at most num_groups ({groups})"))
    elif groups > 1 and moe.num_experts // groups < 2:
        out.append((("moe", "num_groups"), f"a group is scored by its two best experts, so num_groups ({groups}) "
                                           f"must leave at least 2 of the {moe.num_experts} experts in each"))
    elif moe.top_k > moe.top_k_groups * (moe.num_experts // groups):
        out.append((("moe", "top_k"), f"top_k ({moe.top_k}) must be at most the experts of top_k_groups groups "
                                      f"({moe.top_k_groups} x {moe.num_experts // groups})"))
    if moe.dense_layers > num_layers:
        out.append((("moe", "dense_layers"), f"dense_layers ({moe.dense_layers}) must be at most num_layers ({num_layers})"))
    return out


def describe(ref: SourceRef) -> SourceInfo:
    spec = _spec_of(ref)
    found = problems(spec)
    if found:
        raise MtpcError(
            [Diagnostic(message, path="source.synthetic." + ".".join(where)) for where, message in found],
            ExitCode.FINDINGS,
        )
    return SourceInfo(
        architecture=spec.architecture,
        storage=(("weights", "float32 (seeded random)"),),
        facts=(("seed", ref.seed or 0), ("norm_weight_scale", spec.norm_weight_scale),
               *((("mtp_head", "fitted to the main model's greedy continuations"),) if spec.mtp_head == "fitted" else ())),
        tensors=tuple(SourceTensor(n, shape, "float32") for n, shape in sorted(canonical_shapes(spec.architecture).items())),
    )


def open_weights(ref: SourceRef, info: SourceInfo) -> WeightStore:
    spec = _spec_of(ref)
    if spec.mtp_head == "fitted":
        from .fitted_head import fitted_store

        return fitted_store(info.architecture, seed=ref.seed or 0, norm_weight_scale=spec.norm_weight_scale)
    if info.architecture.family == "glm4moe":
        from .random_weights_glm4moe import seeded_glm4moe_store as seeded_store
    else:
        from .random_weights import seeded_store

    return seeded_store(info.architecture, seed=ref.seed or 0, norm_weight_scale=spec.norm_weight_scale)


def _spec_of(ref: SourceRef) -> SyntheticSpec:
    if ref.synthetic is None:
        raise AssertionError("a synthetic SourceRef carries the SyntheticSpec lowering built")
    return ref.synthetic
