"""Step-3.5 / 3.7-Flash's decoder blocks (`step35`): its attention, for full and sliding layers alike.

transformers' `Step3p7Attention`: q/k/v projections without bias, a per-head RMSNorm of q and k (zero-centred
weights: the canonical ones hold 1 + w), NeoX RoPE on the layer kind's share of the head at its theta (half of
a full layer's, all of a sliding layer's), grouped-query attention (a sliding layer within its window), then a
sigmoid gate per query head, `g_proj(x)` `[.., heads]`, multiplied into that head's output before `o_proj`. A
layer's heads, rope and window are its kind's (`Architecture.layer_attention`): a sliding layer has its own
query-head count. The FFN (a dense SwiGLU MLP, or sigmoid-routed experts beside a shared expert, clamped where
`swiglu_limits` say) is the shared skeleton's (`decoder.py`, `moe.py`); the MTP head (`mtp_head.py`) builds its
sliding layer with the same block.
"""

from __future__ import annotations

import re

import onnx_ir as oir

from ..ir import Architecture, LayerAttention, LayerKind, ModelIR
from ..profiles.kernels import NO_FUSION, FusedKernels
from .attention import attend, layer_sinks
from .blocks import Rotary, SequenceOps, merge_heads, project, project_all, rms_norm, rotate_heads, split_heads
from .builder import BuiltGraph, GraphBuilder, GraphData
from .decoder import LayerSite, Mixer, Progress, build_decoder
from .parameters import ParameterSource

_TRUNK_LAYER = re.compile(r"^layers\.(\d+)\.$")


def layer_of(arch: Architecture, prefix: str) -> LayerAttention:
    """How the layer under `prefix` attends: trunk layer `layers.{i}.` by its kind, the MTP block by its own."""
    m = _TRUNK_LAYER.match(prefix)
    return arch.attention_at(int(m[1]) if m else None)


def attention(b: GraphBuilder, ops: SequenceOps, x: oir.Value, prefix: str, arch: Architecture, rot: Rotary,
              past_key: oir.Value, past_value: oir.Value) -> tuple[oir.Value, oir.Value, oir.Value]:
    layer = layer_of(arch, prefix)
    nh, kvh, hd, vd = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim, layer.value_head_dim
    if rot.rotary_dim != layer.rope.rotary_dim:
        raise AssertionError(f"{prefix}: rotary tables of {rot.rotary_dim} channels for a layer rotating {layer.rope.rotary_dim}")
    p = prefix + "self_attn."
    with b.scope("self_attn"):
        q, k, v, gate = project_all(b, x, [p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight",
                                           p + "g_proj.weight"])
        q = rms_norm(b, split_heads(b, ops, q, nh, hd, "q_proj/Reshape"), p + "q_norm.weight", arch.rms_norm_eps, "q_norm")
        k = rms_norm(b, split_heads(b, ops, k, kvh, hd, "k_proj/Reshape"), p + "k_norm.weight", arch.rms_norm_eps, "k_norm")
        q = rotate_heads(b, ops, q, rot, nh, hd, "q")
        k = rotate_heads(b, ops, k, rot, kvh, hd, "k")
        out, present_key, present_value = attend(b, ops, q, k, v, past_key, past_value, layer,
                                                 layer_sinks(b, layer, prefix))
        # One sigmoid per head scales that head's output: [.., nh] -> [.., nh, 1] against [.., nh, vd].
        scale = b.op("Unsqueeze", [b.op("Sigmoid", [gate], name="g_proj/Sigmoid"), b.i64("axis_last", [-1])],
                     name="g_proj/Unsqueeze")
        gated = b.op("Mul", [split_heads(b, ops, out, nh, vd, "out/Reshape"), scale], name="g_proj/Mul")
        out = project(b, merge_heads(b, ops, gated, nh * vd, "o/Reshape"), p + "o_proj.weight", "o_proj/MatMul")
    return out, present_key, present_value


def _mixer(site: LayerSite, i: int, kind: LayerKind) -> Mixer:
    if kind not in (LayerKind.FULL_ATTENTION, LayerKind.SLIDING_ATTENTION):  # lowering accepts only these
        raise AssertionError(f"layer {i}: {kind.value} layers are not supported by the Step-3.5 graph builder")
    rot = site.rotary_for(kind)

    def mix(h: oir.Value) -> oir.Value:
        out, key, value = attention(site.b, site.ops, h, f"layers.{i}.", site.arch, rot,
                                    site.input("past_key_names", i), site.input("past_value_names", i))
        site.present("present_key_names", i, key)
        site.present("present_value_names", i, value)
        return out

    return mix


def build_main(ir: ModelIR, params: ParameterSource, data: GraphData, progress: Progress,
               kernels: FusedKernels = NO_FUSION) -> BuiltGraph:
    return build_decoder(ir, params, data, progress, kernels, _mixer)
