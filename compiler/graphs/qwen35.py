"""The Qwen3.5 hybrid main decoder: Gated DeltaNet (linear attention) and gated full-attention layers
in the shared decoder skeleton (`decoder.py`), to the IR's main contract (dense or paged)."""

from __future__ import annotations

import onnx_ir as oir

from ..ir import LayerKind, ModelIR
from ..profiles.kernels import NO_FUSION, FusedKernels
from .blocks import gated_attention, gated_delta_net
from .builder import BuiltGraph, GraphData
from .decoder import LayerSite, Mixer, Progress, build_decoder, full_attention
from .parameters import ParameterSource


def build_main(ir: ModelIR, params: ParameterSource, data: GraphData, progress: Progress,
               kernels: FusedKernels = NO_FUSION) -> BuiltGraph:
    return build_decoder(ir, params, data, progress, kernels, _mixer)


def _mixer(site: LayerSite, i: int, kind: LayerKind) -> Mixer:
    b, ops = site.b, site.ops
    if kind is LayerKind.LINEAR_ATTENTION:

        def linear(h: oir.Value) -> oir.Value:
            out, conv, recurrent = gated_delta_net(b, ops, h, f"layers.{i}.", site.arch,
                                                   site.input("past_conv_names", i), site.input("past_recurrent_names", i))
            site.present_state(i, conv, recurrent)
            return out

        return linear
    if kind is LayerKind.FULL_ATTENTION:
        return full_attention(site, i, gated_attention)
    # Lowering accepts only the layer kinds above for this family.
    raise AssertionError(f"layer {i}: {kind.value} layers are not supported by the Qwen3.5 graph builder")
