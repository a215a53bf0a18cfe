"""MiMo-V2-Flash's decoder blocks (`mimo2`): its attention, for full and sliding layers alike.

transformers' `MiMoV2FlashAttention` (and vLLM's `MiMoV2Attention`): q/k/v projections without bias or q/k norm,
values times `attention_value_scale`, NeoX RoPE on the first int(head_dim * partial_rotary_factor) channels of
the 192-wide q/k heads at the layer kind's theta, grouped-query attention over values 128 wide (`attend` caches
them zero-padded to the key's width), a sliding layer within its window with one sink logit per query head, then
`o_proj`. A layer's heads, rope, window and sinks are its kind's (`Architecture.layer_attention`): sliding layers
have twice the full layers' KV heads. The FFN (a dense SwiGLU, or sigmoid-routed experts without a shared expert)
is the shared skeleton's (`decoder.py`, `moe.py`); the MTP head (`mtp_head.py`) builds its sliding layer with the
same block.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import Architecture, ModelIR
from ..profiles.kernels import NO_FUSION, FusedKernels
from .attention import attend, layer_sinks
from .blocks import Rotary, SequenceOps, project, project_all, rotate_heads, split_heads
from .builder import BuiltGraph, GraphBuilder, GraphData
from .decoder import Progress, build_decoder
from .parameters import ParameterSource
from .step35 import layer_mixer, layer_of


def attention(b: GraphBuilder, ops: SequenceOps, x: oir.Value, prefix: str, arch: Architecture, rot: Rotary,
              past_key: oir.Value, past_value: oir.Value) -> tuple[oir.Value, oir.Value, oir.Value]:
    layer = layer_of(arch, prefix)
    nh, kvh, hd = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim
    if rot.rotary_dim != layer.rope.rotary_dim:
        raise AssertionError(f"{prefix}: rotary tables of {rot.rotary_dim} channels for a layer rotating {layer.rope.rotary_dim}")
    p = prefix + "self_attn."
    with b.scope("self_attn"):
        q, k, v = project_all(b, x, [p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"])
        if arch.attention_value_scale != 1.0:
            scale = np.asarray(arch.attention_value_scale, b.io_dtype.numpy())
            v = b.op("Mul", [v, b.constant("value_scale", scale)], name="v/Scale")
        q = rotate_heads(b, ops, split_heads(b, ops, q, nh, hd, "q_proj/Reshape"), rot, nh, hd, "q")
        k = rotate_heads(b, ops, split_heads(b, ops, k, kvh, hd, "k_proj/Reshape"), rot, kvh, hd, "k")
        out, present_key, present_value = attend(b, ops, q, k, v, past_key, past_value, layer,
                                                 layer_sinks(b, layer, prefix))
        out = project(b, out, p + "o_proj.weight", "o_proj/MatMul")
    return out, present_key, present_value


def build_main(ir: ModelIR, params: ParameterSource, data: GraphData, progress: Progress,
               kernels: FusedKernels = NO_FUSION) -> BuiltGraph:
    return build_decoder(ir, params, data, progress, kernels, layer_mixer(attention, "MiMo-V2-Flash"))
