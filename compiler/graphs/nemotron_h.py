"""Nemotron-H's decoder blocks (`nemotron_h`): its attention and its main decoder graph, to the IR's contracts.

transformers' `NemotronHBlock`: every layer is one residual sub-block behind its own RMSNorm
(`Architecture.separate_ffn_layers`), whose mixer is Mamba2 (`mamba2.py`), attention, or the FFN alone
(`LayerKind.FEED_FORWARD`: the relu² MoE block of `moe.py`). `NemotronHAttention` is grouped-query
attention with no positional encoding at all (no RoPE, no biases, no q/k norm); the graphs still take
`position_ids` (the runtimes feed them) and leave them unread. The MTP head (`mtp_head.py`) builds its
attention sub-block with `attention` and its MoE sub-block with the family's sparse FFN.
"""

from __future__ import annotations

import onnx_ir as oir

from ..ir import Architecture, LayerKind, ModelIR
from ..profiles.kernels import NO_FUSION, FusedKernels
from .blocks import Rotary, SequenceOps, project, project_all
from .builder import BuiltGraph, GraphBuilder, GraphData
from .decoder import LayerSite, Mixer, Progress, build_decoder, full_attention
from .mamba2 import mamba2
from .moe import feed_forward
from .parameters import ParameterSource


def attention(b: GraphBuilder, ops: SequenceOps, x: oir.Value, prefix: str, arch: Architecture, rot: Rotary,
              past_key: oir.Value, past_value: oir.Value) -> tuple[oir.Value, oir.Value, oir.Value]:
    p = prefix + "self_attn."
    with b.scope("self_attn"):
        q, k, v = project_all(b, x, [p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"])
        out, present_key, present_value = ops.attention(b, q, k, v, past_key, past_value, arch)
        out = project(b, out, p + "o_proj.weight", "o_proj/MatMul")
    return out, present_key, present_value


def _mixer(site: LayerSite, i: int, kind: LayerKind) -> Mixer:
    b, prefix = site.b, f"layers.{i}."
    if kind is LayerKind.MAMBA2:

        def state_space(h: oir.Value) -> oir.Value:
            out, conv, recurrent = mamba2(b, site.ops, h, prefix, site.arch, site.input("past_conv_names", i),
                                          site.input("past_recurrent_names", i))
            site.present_state(i, conv, recurrent)
            return out

        return state_space
    if kind is LayerKind.FULL_ATTENTION:
        return full_attention(site, i, attention)
    if kind is LayerKind.FEED_FORWARD:
        ffn = feed_forward(site.arch, i)
        return lambda h: ffn(b, h, prefix)
    # Lowering accepts only the layer kinds above for this family.
    raise AssertionError(f"layer {i}: {kind.value} layers are not supported by the Nemotron-H graph builder")


def build_main(ir: ModelIR, params: ParameterSource, data: GraphData, progress: Progress,
               kernels: FusedKernels = NO_FUSION) -> BuiltGraph:
    return build_decoder(ir, params, data, progress, kernels, _mixer)
