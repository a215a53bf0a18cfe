"""A Qwen3.5 checkpoint made up from a seed: sizes from the spec, weights seeded random.

`SourceRef.options` holds the spec's `source.synthetic` settings flattened to
dotted keys (`("rope.mrope_section", (3, 3, 2))`), so the reference stays
hashable and a `plan` diff can name the setting that changed. Settings left out
take the defaults declared in schemas/spec.schema.json.
"""

from __future__ import annotations

from typing import Any

from ..diagnostics import Diagnostic, ExitCode, MtpcError
from ..ir import Architecture, LinearAttentionDims, Rope, SourceRef, TokenIds, hybrid_layer_kinds
from ..validation import load_schema
from ..weights import WeightStore
from . import SourceInfo


def options_from_settings(settings: dict) -> tuple[tuple[str, object], ...]:
    """The `source.synthetic` mapping (without `seed`) as sorted, hashable `SourceRef.options`."""
    flat: list[tuple[str, object]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else key, sub)
        else:
            flat.append((prefix, tuple(value) if isinstance(value, list) else value))

    walk("", {k: v for k, v in settings.items() if k != "seed"})
    return tuple(sorted(flat))


def settings_of(ref: SourceRef) -> dict:
    """The nested synthetic settings of `ref`, defaults filled in from the spec schema."""
    from ..spec.defaults import apply_defaults

    nested: dict = {}
    for dotted, value in ref.options:
        *parents, leaf = dotted.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = list(value) if isinstance(value, tuple) else value
    return apply_defaults(_settings_schema(), nested)


def problems(settings: dict) -> list[tuple[tuple[str, ...], str]]:
    """Sizes that do not make a Qwen3.5 model, as (path inside `source.synthetic`, message)."""
    out: list[tuple[tuple[str, ...], str]] = []
    heads, kv_heads = settings["num_attention_heads"], settings["num_key_value_heads"]
    if heads % kv_heads:
        out.append((("num_key_value_heads",), f"num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})"))
    lin = settings["linear_attention"]
    if lin["num_value_heads"] % lin["num_key_heads"]:
        out.append(
            (
                ("linear_attention", "num_value_heads"),
                f"num_value_heads ({lin['num_value_heads']}) must be a multiple of num_key_heads ({lin['num_key_heads']})",
            )
        )
    rope, head_dim = settings["rope"], settings["head_dim"]
    rotary = head_dim * rope["partial_rotary_factor"]
    if abs(rotary - round(rotary)) > 1e-9 or round(rotary) % 2:
        out.append(
            (
                ("rope", "partial_rotary_factor"),
                f"head_dim * partial_rotary_factor = {head_dim} * {rope['partial_rotary_factor']} = {rotary:g}"
                " must be an even whole number (the rotary width)",
            )
        )
    elif sum(rope["mrope_section"]) != round(rotary) // 2:
        out.append(
            (
                ("rope", "mrope_section"),
                f"mrope_section must add up to half the rotary width ({round(rotary) // 2}), not {sum(rope['mrope_section'])}",
            )
        )
    if settings["full_attention_interval"] > settings["num_layers"]:
        out.append(
            (
                ("full_attention_interval",),
                f"full_attention_interval ({settings['full_attention_interval']}) is larger than num_layers"
                f" ({settings['num_layers']}), so no layer would be full attention",
            )
        )
    vocab = settings["vocab_size"]
    for name, ids in _token_ids(settings["tokens"]):
        if any(i >= vocab for i in ids):
            out.append((("tokens", name), f"token id {max(ids)} is outside the vocabulary (vocab_size {vocab})"))
    return out


def architecture_of(settings: dict) -> Architecture:
    interval = settings["full_attention_interval"]
    lin, rope, tokens = settings["linear_attention"], settings["rope"], settings["tokens"]
    eos = tokens["eos"]
    return Architecture(
        family=settings["architecture"],
        hidden_size=settings["hidden_size"],
        intermediate_size=settings["intermediate_size"],
        num_attention_heads=settings["num_attention_heads"],
        num_key_value_heads=settings["num_key_value_heads"],
        head_dim=settings["head_dim"],
        vocab_size=settings["vocab_size"],
        layer_kinds=hybrid_layer_kinds(settings["num_layers"], interval),
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
    )


def describe(ref: SourceRef) -> SourceInfo:
    settings = settings_of(ref)
    found = problems(settings)
    if found:
        raise MtpcError(
            [Diagnostic(message, path="source.synthetic." + ".".join(where)) for where, message in found],
            ExitCode.FINDINGS,
        )
    return SourceInfo(
        architecture=architecture_of(settings),
        storage=(("weights", "float32 (seeded random)"),),
        facts=(("seed", ref.seed or 0), ("norm_weight_scale", settings["norm_weight_scale"])),
    )


def open_weights(ref: SourceRef, info: SourceInfo) -> WeightStore:
    from .random_weights import seeded_store

    scale = settings_of(ref)["norm_weight_scale"]
    return seeded_store(info.architecture, seed=ref.seed or 0, norm_weight_scale=scale)


def _token_ids(tokens: dict) -> list[tuple[str, tuple[int, ...]]]:
    eos = tokens["eos"]
    return [("bos", (tokens["bos"],)), ("eos", tuple(eos) if isinstance(eos, list) else (eos,)), ("pad", (tokens["pad"],))]


def _settings_schema() -> dict:
    return load_schema("spec")["properties"]["source"]["properties"]["synthetic"]
