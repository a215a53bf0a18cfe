"""The Qwen3.5 hybrid main decoder graph, built to the IR's main contract (dense or paged)."""

from __future__ import annotations

from typing import Callable

import onnx_ir as ir

from ..contracts import EMBEDDING_INITIALIZER, MAIN_INPUT_NAMES, MAIN_OUTPUT_NAMES
from ..ir import DecoderConfig, LayerKind, ModelIR, SeedHidden, TensorSpec
from .blocks import cast, embed, gated_attention, gated_delta_net, lm_head, residual_block, rms_norm, rotary
from .builder import ONNX_DTYPES, BuiltGraph, GraphBuilder
from .parameters import ParameterSource
from .sequence import sequence_ops

Progress = Callable[[str], None]


def role_name(cfg: DecoderConfig, role: str, defaults: dict[str, str], layer: int | None = None) -> str:
    """The graph name a decoder config gives a role (a `%d` template for per-layer roles)."""
    template = cfg.input_name(role) or cfg.output_name(role) or defaults[role]
    return template % layer if layer is not None else template


def has_position_rows(spec: TensorSpec) -> bool:
    """`[3, ...]` positions carry one row per MRoPE axis (T, H, W); otherwise a single row."""
    return len(spec.shape) >= 2 and spec.shape[0] == 3


def build_main(model: ModelIR, params: ParameterSource, data_location: str, progress: Progress) -> BuiltGraph:
    arch, cfg = model.architecture, model.main
    contract = cfg.contract
    defaults = {**MAIN_INPUT_NAMES, **MAIN_OUTPUT_NAMES}
    b = GraphBuilder("main", params, data_location)
    b.declare_inputs(contract)
    ops = sequence_ops(b, contract)
    x = embed(b, b.inputs[role_name(cfg, "input_ids", defaults)],
              params.embedding("embed_tokens.weight", EMBEDDING_INITIALIZER))
    positions = contract.input(role_name(cfg, "position_ids", defaults))
    rot = rotary(b, arch.rope, b.inputs[positions.name], has_position_rows(positions))
    outputs: dict[str, ir.Value] = {}

    for i, kind in enumerate(arch.layer_kinds):
        progress(f"{cfg.filename}: layer {i} ({kind.value})")
        names = {role: role_name(cfg, role, defaults, i) for role in defaults if "%d" in defaults[role]}
        if kind is LayerKind.LINEAR_ATTENTION:

            def mixer(h: ir.Value, i=i, names=names) -> ir.Value:
                out, conv, recurrent = gated_delta_net(b, ops, h, f"layers.{i}.", arch,
                                                       b.inputs[names["past_conv_names"]],
                                                       b.inputs[names["past_recurrent_names"]])
                outputs[names["present_conv_names"]] = conv
                outputs[names["present_recurrent_names"]] = recurrent
                return out

        elif kind is LayerKind.FULL_ATTENTION:

            def mixer(h: ir.Value, i=i, names=names) -> ir.Value:
                out, key, value = gated_attention(b, ops, h, f"layers.{i}.", arch, rot,
                                                  b.inputs[names["past_key_names"]],
                                                  b.inputs[names["past_value_names"]])
                outputs[names["present_key_names"]] = key
                outputs[names["present_value_names"]] = value
                return out

        else:
            # Lowering accepts only the layer kinds above for this family.
            raise AssertionError(f"layer {i}: {kind.value} layers are not supported by the Qwen3.5 graph builder")
        with b.scope(f"layers.{i}"):
            x = residual_block(b, x, f"layers.{i}.", arch.rms_norm_eps, mixer)

    normed = rms_norm(b, x, "norm.weight", arch.rms_norm_eps, "norm")
    logits_name = role_name(cfg, "logits", defaults)
    outputs[logits_name] = cast(b, lm_head(b, normed), ONNX_DTYPES[contract.output(logits_name).dtype],
                                "logits/Cast", b.io_dtype)
    hidden_name = role_name(cfg, "hidden_states", defaults)
    if contract.has_output(hidden_name):
        outputs[hidden_name] = normed if model.mtp.seed_hidden is SeedHidden.POST_NORM else x
    return b.finish(contract, outputs)
