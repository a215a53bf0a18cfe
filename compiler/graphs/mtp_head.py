"""The MTP head graph, in the I/O contract of the runtime that consumes it.

One builder for both contracts; what differs is read from the roles the head's decoder config names:
- onnxruntime-genai (`input_ids` in, `logits` out): the head embeds tokens and
  applies the LM head itself, with the main model's values under the same
  initializer names (so runtimes can share them);
- onnx-genai (`inputs_embeds` in, `mtp_hidden` out): the runtime embeds and
  applies the target's LM head; no embedding or LM head inside.

    x = fc(concat[norm_e(embed(token)), norm_h(seed_hidden)])   # embedding first
    x = one decoder layer (its own KV, layer 0; the family's attention of the head's kind, `mtp_layer_kind`:
        a sliding head attends within its window, in the graph; a sparse FFN in MoE families)
    n = mtp.norm(x)  ->  logits = lm_head(n) (or the head's own LM head, `mtp.lm_head.weight`, over a draft
                         vocabulary: `own_lm_head_logits`)
    hidden output (fed back for chained drafts): n, or x where the head is seeded before the trunk's final norm
    (`mtp.seed_hidden: pre_norm`: the chain stays in the space the head's `pre_fc_norm_hidden` reads);
    onnx-genai's `mtp_hidden` is n whatever seeds it (that runtime applies the LM head to it)

Positions are whatever the runtime feeds; no offset is baked in.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir.contracts import EMBEDDING_INITIALIZER
from ..ir import DecoderConfig, DraftVocabulary, HeadContract, ModelIR, SeedHidden
from ..weights.draft import OWN_LM_HEAD
from .blocks import Residual, add_norm, cast, embed, lm_head, project, residual_block, rms_norm, rotary
from ..profiles.kernels import NO_FUSION, FusedKernels
from .builder import ONNX_DTYPES, BuiltGraph, GraphBuilder, GraphData
from .families import attention_block
from .initializers import InitializerGroup, PlannedTensor
from .moe import feed_forward
from .parameters import ParameterSource
from .decoder import Progress, has_position_rows
from .roles import input_name, output_name
from .layouts import sequence_ops

HEAD_LAYER = "mtp.layers.0."
# The draft vocabulary's Gather table: for every token id, its row in the head's own LM head (K: not there).
DRAFT_POSITIONS = "mtp.lm_head.positions"


def build_head(ir: ModelIR, kind: HeadContract, cfg: DecoderConfig, params: ParameterSource,
               data: GraphData, progress: Progress, kernels: FusedKernels = NO_FUSION) -> BuiltGraph:
    arch, contract = ir.architecture, cfg.contract
    eps = arch.rms_norm_eps
    progress(f"{cfg.filename}: MTP head ({kind.value})")
    b = GraphBuilder(f"mtp_{kind.value}", params, data, kernels)
    b.declare_inputs(contract)
    ops = sequence_ops(b, cfg)

    ids_name = cfg.input_name("input_ids")
    if ids_name is not None:
        tokens = embed(b, b.inputs[ids_name], params.embedding("embed_tokens.weight", EMBEDDING_INITIALIZER))
    else:
        tokens = b.inputs[input_name(cfg, "inputs_embeds")]
    seed = b.inputs[input_name(cfg, "hidden_states")]
    positions = contract.input(input_name(cfg, "position_ids"))
    rot = rotary(b, arch.attention_at(None).rope, b.inputs[positions.name], has_position_rows(positions))

    with b.scope("mtp"):
        e = rms_norm(b, tokens, "mtp.pre_fc_norm_embedding.weight", eps, "pre_fc_norm_embedding")
        h = rms_norm(b, seed, "mtp.pre_fc_norm_hidden.weight", eps, "pre_fc_norm_hidden")
        x = b.op("Concat", [e, h], {"axis": -1}, name="fc/Concat")
        x = project(b, x, "mtp.fc.weight", "fc/MatMul")

    outputs: dict[str, oir.Value] = {}

    attention = attention_block(arch)

    def mixer(hidden: oir.Value) -> oir.Value:
        out, key, value = attention(b, ops, hidden, HEAD_LAYER, arch, rot,
                                    b.inputs[input_name(cfg, "past_key_names", 0)],
                                    b.inputs[input_name(cfg, "past_value_names", 0)])
        outputs[output_name(cfg, "present_key_names", 0)] = key
        outputs[output_name(cfg, "present_value_names", 0)] = value
        return out

    with b.scope("mtp/layers.0"):
        stream = residual_block(b, Residual(x), HEAD_LAYER, eps, mixer, feed_forward(arch, None))
    with b.scope("mtp"):
        normed, summed = add_norm(b, stream, "mtp.norm.weight", eps, "norm")
    pre_norm = ir.mtp.seed_hidden is SeedHidden.PRE_NORM and kind is HeadContract.ORT_GENAI
    outputs[output_name(cfg, "hidden_states")] = summed.base if pre_norm else normed
    logits_name = cfg.output_name("logits")
    if logits_name is not None:
        logits_dtype = ONNX_DTYPES[contract.output(logits_name).dtype]
        if ir.mtp.own_lm_head:
            outputs[logits_name] = own_lm_head_logits(b, normed, ir.mtp.draft_vocabulary, arch.vocab_size, logits_dtype)
        else:
            outputs[logits_name] = cast(b, lm_head(b, normed), logits_dtype, "logits/Cast", b.io_dtype)
    return b.finish(contract, outputs)


def own_lm_head_logits(b: GraphBuilder, x: oir.Value, vocabulary: DraftVocabulary | None, vocab_size: int,
                       dtype: oir.DataType) -> oir.Value:
    """Logits from the head's own LM head (`mtp.lm_head.weight`). With a draft vocabulary it scores
    those K tokens only; each row is then widened to the whole vocabulary by one Gather over
    [scores | lowest]: token t reads its score, or the lowest value of the logits' dtype when t is
    not in the vocabulary, so the runtime's argmax and sampling see the same token ids."""
    with b.scope("mtp/lm_head"):
        scores = cast(b, project(b, x, OWN_LM_HEAD, "MatMul"), dtype, "Cast", b.io_dtype)
        if vocabulary is None:
            return scores
        positions = np.full(vocab_size, len(vocabulary.ids), np.int32)
        positions[np.asarray(vocabulary.ids, np.int64)] = np.arange(len(vocabulary.ids), dtype=np.int32)
        planned = PlannedTensor(DRAFT_POSITIONS, oir.DataType.INT32, (vocab_size,))
        (table,) = b.weights(InitializerGroup((planned,), lambda: (positions,)))
        lowest = b.constant("lowest", np.array([np.finfo(dtype.numpy()).min], dtype.numpy()))
        shape = b.op("Shape", [scores], name="Shape")
        lead = b.op("Slice", [shape, b.i64("zero_1d", [0]), b.i64("minus_one_1d", [-1])], name="Slice")
        column = b.op("Concat", [lead, b.i64("one_1d", [1])], {"axis": 0}, name="ColumnShape")
        padded = b.op("Concat", [scores, b.op("Expand", [lowest, column], name="Lowest")], {"axis": -1}, name="Pad")
        return b.op("Gather", [padded, table], {"axis": -1}, name="Scatter")
