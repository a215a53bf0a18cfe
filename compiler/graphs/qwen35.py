"""The Qwen3.5 hybrid main decoder graph, built to the IR's main contract (dense or paged)."""

from __future__ import annotations

from typing import Callable

import onnx_ir as oir

from ..ir.contracts import EMBEDDING_INITIALIZER
from ..ir import LayerKind, ModelIR, SeedHidden, TensorSpec
from .blocks import Residual, add_norm, cast, embed, gated_attention, gated_delta_net, lm_head, residual_block, rotary
from ..profiles.kernels import NO_FUSION, FusedKernels
from .builder import ONNX_DTYPES, BuiltGraph, GraphBuilder, GraphData
from .moe import feed_forward
from .parameters import ParameterSource
from .roles import input_name, output_name
from .sequence import sequence_ops

Progress = Callable[[str], None]


def has_position_rows(spec: TensorSpec) -> bool:
    """`[3, ...]` positions carry one row per MRoPE axis (T, H, W); otherwise a single row."""
    return len(spec.shape) >= 2 and spec.shape[0] == 3


def build_main(ir: ModelIR, params: ParameterSource, data: GraphData, progress: Progress,
               kernels: FusedKernels = NO_FUSION) -> BuiltGraph:
    arch, cfg = ir.architecture, ir.main
    contract = cfg.contract
    b = GraphBuilder("main", params, data, kernels)
    b.declare_inputs(contract)
    ops = sequence_ops(b, cfg)
    stream = Residual(embed(b, b.inputs[input_name(cfg, "input_ids")],
                            params.embedding("embed_tokens.weight", EMBEDDING_INITIALIZER)))
    positions = contract.input(input_name(cfg, "position_ids"))
    rot = rotary(b, arch.rope, b.inputs[positions.name], has_position_rows(positions))
    outputs: dict[str, oir.Value] = {}

    for i, kind in enumerate(arch.layer_kinds):
        progress(f"{cfg.filename}: layer {i} ({kind.value})")
        if kind is LayerKind.LINEAR_ATTENTION:

            def mixer(h: oir.Value, i=i) -> oir.Value:
                out, conv, recurrent = gated_delta_net(b, ops, h, f"layers.{i}.", arch,
                                                       b.inputs[input_name(cfg, "past_conv_names", i)],
                                                       b.inputs[input_name(cfg, "past_recurrent_names", i)])
                outputs[output_name(cfg, "present_conv_names", i)] = conv
                outputs[output_name(cfg, "present_recurrent_names", i)] = recurrent
                conv_values, capsule = ops.take_state_updates()
                if cfg.state_update_capacity:
                    outputs[output_name(cfg, "state_update_conv_value_names", i)] = conv_values
                    outputs[output_name(cfg, "state_update_recurrent_capsule_names", i)] = capsule
                return out

        elif kind is LayerKind.FULL_ATTENTION:

            def mixer(h: oir.Value, i=i) -> oir.Value:
                out, key, value = gated_attention(b, ops, h, f"layers.{i}.", arch, rot,
                                                  b.inputs[input_name(cfg, "past_key_names", i)],
                                                  b.inputs[input_name(cfg, "past_value_names", i)])
                outputs[output_name(cfg, "present_key_names", i)] = key
                outputs[output_name(cfg, "present_value_names", i)] = value
                return out

        else:
            # Lowering accepts only the layer kinds above for this family.
            raise AssertionError(f"layer {i}: {kind.value} layers are not supported by the Qwen3.5 graph builder")
        with b.scope(f"layers.{i}"):
            stream = residual_block(b, stream, f"layers.{i}.", arch.rms_norm_eps, mixer, feed_forward(arch, i))

    normed, stream = add_norm(b, stream, "norm.weight", arch.rms_norm_eps, "norm")
    logits_name = output_name(cfg, "logits")
    head_rows = normed
    if cfg.input_name("logits_indices") is not None:
        # Pruned LM head: only the rows the engine samples or verifies; the hidden output keeps them all.
        head_rows = b.op("Gather", [normed, b.inputs[input_name(cfg, "logits_indices")]], {"axis": 0},
                         name="lm_head/selected_rows/Gather")
    outputs[logits_name] = cast(b, lm_head(b, head_rows), ONNX_DTYPES[contract.output(logits_name).dtype],
                                "logits/Cast", b.io_dtype)
    hidden_name = cfg.output_name("hidden_states")  # dropped when no head reads it
    if hidden_name is not None:
        outputs[hidden_name] = normed if ir.mtp.seed_hidden is SeedHidden.POST_NORM else stream.base
    return b.finish(contract, outputs)
