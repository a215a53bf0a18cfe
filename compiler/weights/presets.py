"""Named quantization recipes: `quantization.default.preset` expanded into a scheme per weight.

A preset decides what a user would otherwise spell out as a default and a list of overrides, from
the architecture (how many layers, which kind each is, whether the head has a block of its own, each
weight's row length), so one name fits any checkpoint. `expand` returns the preset's default scheme
and one override per weight it treats otherwise, each labelled with the reason (`plan`, the model
card and `quantization.json` show it as the weight's rule). The spec's own overrides come first and win.

`q4_k_m`: the tensor types llama.cpp's `llama-quantize ... Q4_K_M` chooses (src/llama-quant.cpp,
`llama_tensor_get_type_impl` and its fallbacks, llama-cpp-python 0.3.36's vendored llama.cpp), each
in the nearest form onnxruntime's block-quantized ops store:

- Q4_K, the default: 4-bit blocks of 32 (Q4_K's sub-blocks) with a scale and a float minimum each, fitted
  by Q4_K's own search (`quant.quantize_linear`); the embedding (GatherBlockQuantized takes no float zero
  points) with an integer zero point instead;
- Q6_K: 8-bit blocks of 16 (its sub-blocks). It goes to the LM head, and to the value-like and down
  projections `use_more_bits` picks (i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2), each kind counted in
  the GGUF's block order, an MTP block after the trunk's; value-like is a full-attention layer's
  `v_proj` and a linear-attention layer's fused `in_proj_qkv` (llama.cpp's `attn_qkv`);
- a row length that is no multiple of 256 takes no k-quant: Q4_K falls back to Q5_0 and Q6_K to Q8_0
  (both 8-bit blocks of 32 here), and a row that is no multiple of 32 stays float;
- the embedding is Q4_K too, unless onnx-genai is a target (its head borrows a dense float table).

MoE expert stacks follow the default (QMoE takes one form for a layer's stacks, where llama.cpp
promotes some down stacks); MLA's kv_b is no MatMul operand and stays float (passes/quantization.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..ir import Architecture, LayerKind, QuantOverride, QuantScheme
from .shapes import canonical_shapes

# llama.cpp type -> (the form that stands for it, the row length its blocks need).
FORMS = {
    "Q4_K": (QuantScheme(bits=4, block_size=32, symmetric=False, float_zero_points=True), 256),
    "Q6_K": (QuantScheme(bits=8, block_size=16), 256),
    "Q5_0": (QuantScheme(bits=8, block_size=32), 32),
    "Q8_0": (QuantScheme(bits=8, block_size=32), 32),
}
_FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}  # llama-quantize's, for a row its super-blocks do not divide


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _q4_k_m_types(arch: Architecture) -> dict[str, tuple[str, str]]:
    """Canonical name -> (llama.cpp type before fallbacks, why) for the weights not at the default Q4_K."""
    blocks = [f"layers.{i}." for i in range(arch.num_layers)] + [f"mtp.layers.{j}." for j in range(arch.mtp_num_layers)]
    kinds = list(arch.layer_kinds) + [LayerKind.FULL_ATTENTION] * arch.mtp_num_layers
    value_like = [p + ("self_attn.v_proj.weight" if kind is LayerKind.FULL_ATTENTION else "linear_attn.in_proj_qkv.weight")
                  for p, kind in zip(blocks, kinds)]
    dense = [*(not arch.is_sparse(i) for i in range(arch.num_layers)), *(arch.moe is None,) * arch.mtp_num_layers]
    down = [p + "mlp.down_proj.weight" for p, is_dense in zip(blocks, dense) if is_dense]
    out = {"lm_head.weight": ("Q6_K", "the LM head")}
    for kind, names in (("value-like projection", value_like), ("down projection", down)):
        out.update({name: ("Q6_K", f"{name.removesuffix('.weight')}: {kind} {i + 1} of {len(names)}")
                    for i, name in enumerate(names) if _use_more_bits(i, len(names))})
    return out


def _q4_k_m(arch: Architecture, float_embedding: bool) -> tuple[QuantScheme, list[tuple[str, QuantScheme, str]]]:
    shapes = canonical_shapes(arch)
    chosen = _q4_k_m_types(arch)
    choices = []
    for name, shape in shapes.items():
        if len(shape) != 2 or name == "embed_tokens.weight" and float_embedding:
            continue
        kind, why = chosen.get(name, ("Q4_K", ""))
        form, row = FORMS[kind]
        if shape[-1] % row:
            kind, why = _FALLBACK[kind], f"{why}{'; ' if why else ''}rows of {shape[-1]} take no {kind}"
            form, row = FORMS[kind]
        if shape[-1] % row:
            choices.append((name, QuantScheme(bits=None), f"float: rows of {shape[-1]} take no {kind}"))
        elif why or name == "embed_tokens.weight":
            choices.append((name, form, f"{kind} ({why or 'the embedding'})"))
    if float_embedding:
        choices.append(("embed_tokens.weight", QuantScheme(bits=None),
                        "the embedding float: onnx-genai's head borrows a dense table"))
    return FORMS["Q4_K"][0], choices


PRESETS: dict[str, Callable[[Architecture, bool], tuple[QuantScheme, list[tuple[str, QuantScheme, str]]]]] = {
    "q4_k_m": _q4_k_m,
}
DEFAULT_REASON = {"q4_k_m": "Q4_K"}


def expand(name: str, arch: Architecture, *, accuracy_level: int | None, float_embedding: bool,
           existing: set[str]) -> tuple[QuantScheme, tuple[QuantOverride, ...], str]:
    """The preset's default scheme, its labelled overrides for the weights in `existing` (canonical names)
    and the label of the weights it leaves at the default; every scheme at `accuracy_level` (None: the
    runtime profile's)."""
    default, choices = PRESETS[name](arch, float_embedding)
    overrides = tuple(
        QuantOverride(match, replace(scheme, accuracy_level=accuracy_level), label=f"preset {name}: {why}")
        for match, scheme, why in choices if match in existing
    )
    return replace(default, accuracy_level=accuracy_level), overrides, f"preset {name}: {DEFAULT_REASON[name]}"
