"""GLM-4.5's decoder blocks (`glm4moe`): its attention and its main decoder graph, to the IR's contracts.

transformers' `Glm4MoeAttention`: grouped-query attention with optional q/k/v biases and an optional
per-head RMSNorm of q and k before the rotation, NeoX half-split RoPE on the first
`head_dim * partial_rotary_factor` channels (one position per token), no output gate. Every layer
is full attention; the first `moe.dense_layers` have a SwiGLU MLP, the others GLM's sigmoid-routed
sparse block (`moe.py`, `moe_routing.py`). Norms are plain RMSNorm scales (sources pass them through).
The MTP head (`mtp_head.py`) builds its decoder layer with `attention` below.
"""

from __future__ import annotations

import onnx_ir as oir

from ..ir.contracts import EMBEDDING_INITIALIZER
from ..ir import Architecture, ModelIR, SeedHidden
from ..profiles.kernels import NO_FUSION, FusedKernels
from .blocks import (
    Residual, Rotary, SequenceOps, add_norm, cast, embed, initializer_name, lm_head, project, project_all,
    residual_block, rms_norm, rotary, rotate_heads, split_heads,
)
from .builder import ONNX_DTYPES, BuiltGraph, GraphBuilder, GraphData
from .moe import feed_forward
from .parameters import ParameterSource
from .qwen35 import Progress, has_position_rows
from .roles import input_name, output_name
from .sequence import sequence_ops


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

        def mixer(h: oir.Value, i=i) -> oir.Value:
            out, key, value = attention(b, ops, h, f"layers.{i}.", arch, rot,
                                        b.inputs[input_name(cfg, "past_key_names", i)],
                                        b.inputs[input_name(cfg, "past_value_names", i)])
            outputs[output_name(cfg, "present_key_names", i)] = key
            outputs[output_name(cfg, "present_value_names", i)] = value
            return out

        with b.scope(f"layers.{i}"):
            stream = residual_block(b, stream, f"layers.{i}.", arch.rms_norm_eps, mixer, feed_forward(arch, i))

    normed, stream = add_norm(b, stream, "norm.weight", arch.rms_norm_eps, "norm")
    head_rows = normed
    if cfg.input_name("logits_indices") is not None:
        head_rows = b.op("Gather", [normed, b.inputs[input_name(cfg, "logits_indices")]], {"axis": 0},
                         name="lm_head/selected_rows/Gather")
    logits_name = output_name(cfg, "logits")
    outputs[logits_name] = cast(b, lm_head(b, head_rows), ONNX_DTYPES[contract.output(logits_name).dtype],
                                "logits/Cast", b.io_dtype)
    hidden_name = cfg.output_name("hidden_states")  # dropped when no head reads it
    if hidden_name is not None:
        outputs[hidden_name] = normed if ir.mtp.seed_hidden is SeedHidden.POST_NORM else stream.base
    return b.finish(contract, outputs)
