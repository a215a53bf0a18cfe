"""Qwen3.5-MoE's sparse FFN as a graph: onnxruntime's fused `MoE` op plus the gated shared expert.

The `MoE` contrib op (com.microsoft, CPU kernel in onnxruntime 1.32) takes the router *logits*
and does Qwen3.5's routing itself: softmax over all experts, top-k, and with
`normalize_routing_weights=1` the k weights renormalized to sum to one (measured against numpy,
tests/graphs/test_moe_op.py). Its CPU kernel runs only the fused, interleaved SwiGLU layout
(`swiglu_fusion=1`: FC1 rows `[g0, u0, g1, u1, ...]`); with `activation_alpha=1`,
`activation_beta=0` and no `swiglu_limit` that is `silu(g) * u`. The shared expert and its
sigmoid gate are explicit ops: the op has no shared expert, and `GatedAdd` applies no sigmoid
on CPU.

    y = MoE(x, x @ router^T) + sigmoid(x @ shared_gate^T) * shared_mlp(x)
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_ir as oir

from ..ir import Architecture, MoeDims
from .blocks import initializer_name, mlp, project, silu
from .builder import MS, GraphBuilder
from .initializers import InitializerGroup, PlannedTensor

FeedForward = Callable[[GraphBuilder, oir.Value, str], oir.Value]


def feed_forward(arch: Architecture) -> FeedForward:
    """The FFN every layer of `arch` uses: the dense MLP, or the sparse MoE block."""
    moe = arch.moe
    if moe is None:
        return mlp
    return lambda b, x, prefix: sparse_moe(b, x, prefix, moe)


def interleave_gate_up(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """`[E, I, H]` gate and up -> `[E, 2I, H]` with rows `g0, u0, g1, u1, ...` (swiglu_fusion=1)."""
    e, i, h = gate.shape
    return np.stack([gate, up], axis=2).reshape(e, 2 * i, h)


def _expert_weights(b: GraphBuilder, p: str) -> tuple[oir.Value, oir.Value]:
    """FC1 (interleaved gate/up) and FC2 (down) of the routed experts, float in the I/O dtype."""
    store = b.params.store
    gate_name, up_name, down_name = (p + f"experts.{proj}_proj.weight" for proj in ("gate", "up", "down"))
    e, i, h = store.info(gate_name).shape
    fc1 = PlannedTensor(initializer_name(p + "experts.gate_up_proj.weight"), b.io_dtype, (e, 2 * i, h))
    fc2 = PlannedTensor(initializer_name(down_name), b.io_dtype, (e, h, i))
    (w1,) = b.weights(InitializerGroup((fc1,), lambda: (interleave_gate_up(store.read_float(gate_name),
                                                                           store.read_float(up_name)),)))
    (w2,) = b.weights(InitializerGroup((fc2,), lambda: (store.read_float(down_name),)))
    return w1, w2


def sparse_moe(b: GraphBuilder, x: oir.Value, prefix: str, moe: MoeDims) -> oir.Value:
    p = prefix + "mlp."
    with b.scope("moe"):
        logits = project(b, x, p + "gate.weight", "router/MatMul")
        logits = b.op("Reshape", [logits, b.i64(f"router_shape_{moe.num_experts}", [-1, moe.num_experts])],
                      name="router/Reshape")
        fc1, fc2 = _expert_weights(b, p)
        attrs = {"k": moe.top_k, "activation_type": "swiglu", "swiglu_fusion": 1, "activation_alpha": 1.0,
                 "activation_beta": 0.0, "normalize_routing_weights": int(moe.normalize_top_k)}
        routed = b.op("MoE", [x, logits, fc1, None, fc2], attrs, name="MoE", domain=MS)
    with b.scope("shared_expert"):
        s = p + "shared_expert."
        gate = silu(b, project(b, x, s + "gate_proj.weight", "gate_proj/MatMul"), "act")
        up = project(b, x, s + "up_proj.weight", "up_proj/MatMul")
        shared = project(b, b.op("Mul", [gate, up], name="Mul"), s + "down_proj.weight", "down_proj/MatMul")
        if moe.shared_expert_sigmoid_gate:
            scale = b.op("Sigmoid", [project(b, x, p + "shared_expert_gate.weight", "gate/MatMul")], name="gate/Sigmoid")
            shared = b.op("Mul", [shared, scale], name="gate/Mul")
    return b.op("Add", [routed, shared], name="moe/Add")
