"""GLM-4.5's (DeepSeek-V3's) sigmoid routing, expressed so onnxruntime's `MoE` / `QMoE` ops apply it exactly.

The ops route by themselves: softmax over all experts of their `router_probs` input, top-k, and
(`normalize_routing_weights=1`) the k weights renormalized. GLM routes otherwise (`ir/moe.py`):
sigmoid scores, a bias that only chooses, group-limited top-k, the unbiased scores as weights. So
the choice is made here in plain ONNX ops, in float32 as transformers does it, and the op is handed

    router_probs[e] = log(sigmoid(logit_e))  for the chosen experts,  -inf for the others

with `k = top_k`: its softmax is zero off the chosen experts and `sigmoid_e / sum(sigmoid)` on them,
which is GLM's renormalized weight, so its top-k picks exactly our experts (the weights measured
against transformers' `Glm4MoeMoE` within 2.4e-7; tests/glm4moe/ hold the graphs to the numpy reference
and to transformers' tokens). What the op
cannot do is applied to its output: the routed scaling factor, and without `norm_topk_prob` the
sum of the chosen scores (the op's weights are always normalized on this path).
`log(sigmoid(x))` is `-softplus(-x)`, finite for every finite logit.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import MoeDims
from .blocks import cast, initializer_name
from .builder import GraphBuilder

F32 = oir.DataType.FLOAT


def sigmoid_routing(b: GraphBuilder, logits: oir.Value, moe: MoeDims, prefix: str
                    ) -> tuple[oir.Value, oir.Value | None]:
    """Float32 router logits `[T, E]` -> (the op's `router_probs` `[T, E]` in the I/O dtype, the float32 `[T, 1]`
    sums of the chosen scores its output is multiplied by without `normalize_top_k`, else None)."""
    k = moe.top_k
    with b.scope("routing"):
        scores = b.op("Sigmoid", [logits], name="Sigmoid")
        choice = scores
        if moe.selection_bias:
            canonical = prefix + "gate.e_score_correction_bias"
            (bias,) = b.weights(b.params.tensor(canonical, initializer_name(canonical), dtype=F32))
            choice = b.op("Add", [scores, bias], name="selection/Add")
        if moe.num_groups > 1:
            choice = _best_groups(b, choice, moe)
        _, chosen = b.op_multi("TopK", [choice, b.i64(f"k_{k}", [k])], {"axis": -1}, name="TopK", num_outputs=2)
        chosen_logits = b.op("GatherElements", [logits, chosen], {"axis": -1}, name="chosen/GatherElements")
        log_weights = b.op("Neg", [b.op("Softplus", [b.op("Neg", [chosen_logits], name="chosen/Neg")],
                                        name="chosen/Softplus")], name="chosen/log_sigmoid")
        masked = b.op("ConstantOfShape", [b.op("Shape", [logits], name="Shape")],
                      {"value": oir.tensor(np.array([-np.inf], np.float32))}, name="masked/ConstantOfShape")
        probs = b.op("ScatterElements", [masked, chosen, log_weights], {"axis": -1}, name="ScatterElements")
        probs = cast(b, probs, b.io_dtype, "probs/Cast", F32)
        factor = None
        if not moe.normalize_top_k:
            chosen_scores = b.op("GatherElements", [scores, chosen], {"axis": -1}, name="chosen_scores/GatherElements")
            factor = b.op("ReduceSum", [chosen_scores, b.i64("axis_last", [-1])], {"keepdims": 1}, name="weights/ReduceSum")
    return probs, factor


def softmax_choice(b: GraphBuilder, logits: oir.Value, moe: MoeDims) -> oir.Value:
    """Float32 router logits `[T, E]` -> the op's `router_probs` in the I/O dtype, for softmax routing.

    In float32 the logits go to the op as they are. In a narrower dtype the op's own top-k would choose from
    rounded logits, so the top-k is taken here in float32 and the op gets the chosen logits with -inf
    elsewhere: its softmax over them is the renormalized top-k weight, and its top-k our choice. Without
    renormalization the op needs every logit (its weights are the full softmax's), so they go as they are.
    """
    if b.io_dtype == F32 or not moe.normalize_top_k:
        return cast(b, logits, b.io_dtype, "router/logits/Cast", F32)
    k = moe.top_k
    with b.scope("routing"):
        chosen_logits, chosen = b.op_multi("TopK", [logits, b.i64(f"k_{k}", [k])], {"axis": -1}, name="TopK",
                                           num_outputs=2)
        masked = b.op("ConstantOfShape", [b.op("Shape", [logits], name="Shape")],
                      {"value": oir.tensor(np.array([-np.inf], np.float32))}, name="masked/ConstantOfShape")
        probs = b.op("ScatterElements", [masked, chosen, chosen_logits], {"axis": -1}, name="ScatterElements")
        return cast(b, probs, b.io_dtype, "probs/Cast", F32)


def _best_groups(b: GraphBuilder, choice: oir.Value, moe: MoeDims) -> oir.Value:
    """`choice` `[T, E]` with the experts outside each token's `top_k_groups` best groups at -inf; a group
    scores the sum of its two best experts' choice values."""
    groups, per_group = moe.num_groups, moe.num_experts // moe.num_groups
    with b.scope("groups"):
        grouped = b.op("Reshape", [choice, b.i64(f"shape_groups_{groups}x{per_group}", [-1, groups, per_group])],
                       name="Reshape")
        best_two, _ = b.op_multi("TopK", [grouped, b.i64("k_2", [2])], {"axis": -1}, name="best_two/TopK", num_outputs=2)
        group_scores = b.op("ReduceSum", [best_two, b.i64("axis_last", [-1])], {"keepdims": 0}, name="ReduceSum")
        _, kept = b.op_multi("TopK", [group_scores, b.i64(f"k_{moe.top_k_groups}", [moe.top_k_groups])], {"axis": -1},
                             name="kept/TopK", num_outputs=2)
        zeros = b.op("Mul", [group_scores, b.constant("zero_f32", np.asarray(0.0, np.float32))], name="zeros/Mul")
        ones = b.op("ConstantOfShape", [b.op("Shape", [kept], name="kept/Shape")],
                    {"value": oir.tensor(np.array([1.0], np.float32))}, name="ones/ConstantOfShape")
        marks = b.op("ScatterElements", [zeros, kept, ones], {"axis": -1}, name="ScatterElements")
        keep = b.op("Unsqueeze", [b.op("Cast", [marks], {"to": oir.DataType.BOOL}, name="keep/Cast"),
                                  b.i64("axis_last", [-1])], name="keep/Unsqueeze")
        minus_inf = b.constant("minus_inf_f32", np.asarray(-np.inf, np.float32))
        masked = b.op("Where", [keep, grouped, minus_inf], name="Where")
        return b.op("Reshape", [masked, b.i64(f"router_shape_{moe.num_experts}", [-1, moe.num_experts])],
                    name="Reshape_back")


def scaled(b: GraphBuilder, routed: oir.Value, x: oir.Value, factor: oir.Value | None, moe: MoeDims) -> oir.Value:
    """The op's output `[.., H]` (the shape of `x`) times the per-token `[T, 1]` factor (if any) and the
    routed scaling factor."""
    if factor is not None:
        shape = b.op("Shape", [x], name="weights/Shape")
        lead = b.op("Slice", [shape, b.i64("zero_1d", [0]), b.i64("minus_one_1d", [-1])], name="weights/Slice")
        per_token = b.op("Reshape", [factor, b.op("Concat", [lead, b.i64("one_1d", [1])], {"axis": 0},
                                                  name="weights/Concat")], name="weights/Reshape")
        routed = b.op("Mul", [routed, cast(b, per_token, b.io_dtype, "weights/Cast", F32)], name="weights/Mul")
    if moe.routed_scaling_factor != 1.0:
        scale = b.constant("routed_scaling_factor", np.asarray(moe.routed_scaling_factor, b.io_dtype.numpy()))
        routed = b.op("Mul", [routed, scale], name="scale/Mul")
    return routed
