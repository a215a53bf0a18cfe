"""GLM-4.5's decoder blocks (`glm4moe`): its attention and its main decoder graph, to the IR's contracts.

transformers' `Glm4MoeAttention`: grouped-query attention with optional q/k/v biases and an optional
per-head RMSNorm of q and k before the rotation, NeoX half-split RoPE on the first
`head_dim * partial_rotary_factor` channels (one position per token), no output gate. Every layer
is full attention; the first `moe.dense_layers` have a SwiGLU MLP, the others GLM's sigmoid-routed
sparse block (`moe.py`, `moe_routing.py`). Norms are plain RMSNorm scales (sources pass them through).
The main decoder is the shared skeleton (`decoder.py`) with `attention` below as every layer's mixer;
the MTP head (`mtp_head.py`) builds its decoder layer with it too.
"""

from __future__ import annotations

import onnx_ir as oir

from ..ir import Architecture, ModelIR
from ..profiles.kernels import NO_FUSION, FusedKernels
from .blocks import Rotary, SequenceOps, initializer_name, project, project_all, rms_norm, rotate_heads, split_heads
from .builder import BuiltGraph, GraphBuilder, GraphData
from .decoder import Progress, attention_only, build_decoder
from .parameters import ParameterSource


def attention(b: GraphBuilder, ops: SequenceOps, x: oir.Value, prefix: str, arch: Architecture, rot: Rotary,
              past_key: oir.Value, past_value: oir.Value) -> tuple[oir.Value, oir.Value, oir.Value]:
    nh, kvh, hd = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    p = prefix + "self_attn."
    with b.scope("self_attn"):
        q, k, v = project_all(b, x, [p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"])
        if arch.attention_bias:
            q, k, v = (_add_bias(b, t, f"{p}{proj}.bias", proj) for t, proj in ((q, "q_proj"), (k, "k_proj"), (v, "v_proj")))
        q = split_heads(b, ops, q, nh, hd, "q_proj/Reshape")
        k = split_heads(b, ops, k, kvh, hd, "k_proj/Reshape")
        if arch.qk_norm:
            q = rms_norm(b, q, p + "q_norm.weight", arch.rms_norm_eps, "q_norm")
            k = rms_norm(b, k, p + "k_norm.weight", arch.rms_norm_eps, "k_norm")
        q = rotate_heads(b, ops, q, rot, nh, hd, "q")
        k = rotate_heads(b, ops, k, rot, kvh, hd, "k")
        out, present_key, present_value = ops.attention(b, q, k, v, past_key, past_value, arch)
        out = project(b, out, p + "o_proj.weight", "o_proj/MatMul")
    return out, present_key, present_value


def _add_bias(b: GraphBuilder, x: oir.Value, canonical: str, proj: str) -> oir.Value:
    (bias,) = b.weights(b.params.tensor(canonical, initializer_name(canonical)))
    return b.op("Add", [x, bias], name=f"{proj}/Add")


def build_main(ir: ModelIR, params: ParameterSource, data: GraphData, progress: Progress,
               kernels: FusedKernels = NO_FUSION) -> BuiltGraph:
    return build_decoder(ir, params, data, progress, kernels, attention_only(attention, "GLM-4.5"))
