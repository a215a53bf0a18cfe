"""A Qwen3.5 checkpoint made up from a seed: the model lowering put in `SourceRef.synthetic`, weights seeded random."""

from __future__ import annotations

from ..util.diagnostics import Diagnostic, ExitCode, MtpcError
from ..ir import SourceRef, SourceTensor, SyntheticSpec
from ..weights import WeightStore, canonical_shapes
from .info import SourceInfo


def problems(spec: SyntheticSpec) -> list[tuple[tuple[str, ...], str]]:
    """Sizes that do not make a Qwen3.5 model, as (path inside `source.synthetic`, message)."""
    arch = spec.architecture
    out: list[tuple[tuple[str, ...], str]] = []
    heads, kv_heads = arch.num_attention_heads, arch.num_key_value_heads
    if arch.moe is not None and arch.moe.top_k > arch.moe.num_experts:
        out.append((("moe", "top_k"), f"top_k ({arch.moe.top_k}) must be at most num_experts ({arch.moe.num_experts})"))
    if heads % kv_heads:
        out.append((("num_key_value_heads",), f"num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})"))
    lin = arch.linear_attention
    if lin.num_value_heads % lin.num_key_heads:
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
    elif sum(rope.mrope_section) != round(rotary) // 2:
        out.append(
            (
                ("rope", "mrope_section"),
                f"mrope_section must add up to half the rotary width ({round(rotary) // 2}), not {sum(rope.mrope_section)}",
            )
        )
    if spec.full_attention_interval > arch.num_layers:
        out.append(
            (
                ("full_attention_interval",),
                f"full_attention_interval ({spec.full_attention_interval}) is larger than num_layers"
                f" ({arch.num_layers}), so no layer would be full attention",
            )
        )
    tokens, vocab = arch.tokens, arch.vocab_size
    for name, ids in (("bos", (tokens.bos,)), ("eos", tokens.eos), ("pad", (tokens.pad,))):
        if any(i >= vocab for i in ids):
            out.append((("tokens", name), f"token id {max(ids)} is outside the vocabulary (vocab_size {vocab})"))
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
        facts=(("seed", ref.seed or 0), ("norm_weight_scale", spec.norm_weight_scale)),
        tensors=tuple(SourceTensor(n, shape, "float32") for n, shape in sorted(canonical_shapes(spec.architecture).items())),
    )


def open_weights(ref: SourceRef, info: SourceInfo) -> WeightStore:
    from .random_weights import seeded_store

    return seeded_store(info.architecture, seed=ref.seed or 0, norm_weight_scale=_spec_of(ref).norm_weight_scale)


def _spec_of(ref: SourceRef) -> SyntheticSpec:
    if ref.synthetic is None:
        raise AssertionError("a synthetic SourceRef carries the SyntheticSpec lowering built")
    return ref.synthetic
