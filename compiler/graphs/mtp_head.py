"""The MTP head graph, in the I/O contract of the runtime that consumes it.

One builder for both contracts; what differs is read from the head's contract:
- onnxruntime-genai (`input_ids` in, `logits` out): the head embeds tokens and
  applies the LM head itself, with the main model's values under the same
  initializer names (so runtimes can share them);
- onnx-genai (`inputs_embeds` in, `mtp_hidden` out): the runtime embeds and
  applies the target's LM head; no embedding or LM head inside.

    x = fc(concat[norm_e(embed(token)), norm_h(seed_hidden)])   # embedding first
    x = one full-attention decoder layer (its own KV, layer 0)
    n = mtp.norm(x)  ->  hidden output (fed back for chained drafts), logits = lm_head(n)

Positions are whatever the runtime feeds; no offset is baked in.
"""

from __future__ import annotations

import onnx_ir as ir

from ..contracts import (
    EMBEDDING_INITIALIZER,
    ONNX_GENAI_HEAD_INPUT_NAMES,
    ONNX_GENAI_HEAD_OUTPUT_NAMES,
    ORT_HEAD_INPUT_NAMES,
    ORT_HEAD_OUTPUT_NAMES,
)
from ..ir import DecoderConfig, HeadContract, ModelIR
from .blocks import cast, embed, gated_attention, lm_head, project, residual_block, rms_norm, rotary
from .builder import ONNX_DTYPES, BuiltGraph, GraphBuilder
from .parameters import ParameterSource
from .qwen35 import Progress, has_position_rows, role_name
from .sequence import sequence_ops

HEAD_LAYER = "mtp.layers.0."
DEFAULT_NAMES = {
    HeadContract.ORT_GENAI: {**ORT_HEAD_INPUT_NAMES, **ORT_HEAD_OUTPUT_NAMES},
    HeadContract.ONNX_GENAI: {**ONNX_GENAI_HEAD_INPUT_NAMES, **ONNX_GENAI_HEAD_OUTPUT_NAMES},
}
# Input and output share the role key "hidden_states"; the defaults above would let the output's
# name shadow the input's, so the input is looked up on its own.
SEED_INPUT = {HeadContract.ORT_GENAI: ORT_HEAD_INPUT_NAMES["hidden_states"],
              HeadContract.ONNX_GENAI: ONNX_GENAI_HEAD_INPUT_NAMES["hidden_states"]}
HIDDEN_OUTPUT = {HeadContract.ORT_GENAI: ORT_HEAD_OUTPUT_NAMES["hidden_states"],
                 HeadContract.ONNX_GENAI: ONNX_GENAI_HEAD_OUTPUT_NAMES["hidden_states"]}


def build_head(model: ModelIR, kind: HeadContract, cfg: DecoderConfig, params: ParameterSource,
               data_location: str, progress: Progress) -> BuiltGraph:
    arch, contract = model.architecture, cfg.contract
    defaults = DEFAULT_NAMES[kind]
    eps = arch.rms_norm_eps
    progress(f"{cfg.filename}: MTP head ({kind.value})")
    b = GraphBuilder(f"mtp_{kind.value}", params, data_location)
    b.declare_inputs(contract)
    ops = sequence_ops(b, contract)

    ids_name = cfg.input_name("input_ids") or defaults.get("input_ids")
    if ids_name and contract.has_input(ids_name):
        tokens = embed(b, b.inputs[ids_name], params.embedding("embed_tokens.weight", EMBEDDING_INITIALIZER))
    else:
        tokens = b.inputs[role_name(cfg, "inputs_embeds", defaults)]
    seed = b.inputs[cfg.input_name("hidden_states") or SEED_INPUT[kind]]
    positions = contract.input(role_name(cfg, "position_ids", defaults))
    rot = rotary(b, arch.rope, b.inputs[positions.name], has_position_rows(positions))

    with b.scope("mtp"):
        e = rms_norm(b, tokens, "mtp.pre_fc_norm_embedding.weight", eps, "pre_fc_norm_embedding")
        h = rms_norm(b, seed, "mtp.pre_fc_norm_hidden.weight", eps, "pre_fc_norm_hidden")
        x = b.op("Concat", [e, h], {"axis": -1}, name="fc/Concat")
        x = project(b, x, "mtp.fc.weight", "fc/MatMul")

    outputs: dict[str, ir.Value] = {}

    def mixer(hidden: ir.Value) -> ir.Value:
        out, key, value = gated_attention(b, ops, hidden, HEAD_LAYER, arch, rot,
                                          b.inputs[role_name(cfg, "past_key_names", defaults, 0)],
                                          b.inputs[role_name(cfg, "past_value_names", defaults, 0)])
        outputs[role_name(cfg, "present_key_names", defaults, 0)] = key
        outputs[role_name(cfg, "present_value_names", defaults, 0)] = value
        return out

    with b.scope("mtp/layers.0"):
        x = residual_block(b, x, HEAD_LAYER, eps, mixer)
    with b.scope("mtp"):
        normed = rms_norm(b, x, "mtp.norm.weight", eps, "norm")
    outputs[cfg.output_name("hidden_states") or HIDDEN_OUTPUT[kind]] = normed
    logits_name = cfg.output_name("logits") or defaults.get("logits")
    if logits_name and contract.has_output(logits_name):
        logits_dtype = ONNX_DTYPES[contract.output(logits_name).dtype]
        outputs[logits_name] = cast(b, lm_head(b, normed), logits_dtype, "logits/Cast", b.io_dtype)
    return b.finish(contract, outputs)
