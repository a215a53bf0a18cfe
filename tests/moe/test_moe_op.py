"""onnxruntime's fused MoE op computes Qwen3.5-MoE's routed experts exactly as the numpy reference does.

What `graphs/moe.py` relies on, measured on the CPU kernel: `MoE` takes router *logits*, and with
`normalize_routing_weights=1` it routes softmax -> top-k -> renormalize (with 0 it skips the
renormalization, which is not Qwen3.5's); FC1 rows are interleaved gate/up (`swiglu_fusion=1`),
and the CPU kernel refuses the concatenated layout (`swiglu_fusion=2`).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from mtpc.graphs.moe import interleave_gate_up
from mtpc.ir import MoeDims
from mtpc.reference.forward import _Weights
from mtpc.reference.moe import route, sparse_moe
from mtpc.weights import ArrayWeightStore

E, H, I, TOKENS = 8, 16, 8, 7


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(3)
    return {
        "mlp.gate.weight": rng.standard_normal((E, H)).astype(np.float32),
        "mlp.experts.gate_proj.weight": (rng.standard_normal((E, I, H)) / 4).astype(np.float32),
        "mlp.experts.up_proj.weight": (rng.standard_normal((E, I, H)) / 4).astype(np.float32),
        "mlp.experts.down_proj.weight": (rng.standard_normal((E, H, I)) / 3).astype(np.float32),
        # A shared expert that contributes nothing isolates the routed part the op computes.
        "mlp.shared_expert.gate_proj.weight": np.zeros((4, H), np.float32),
        "mlp.shared_expert.up_proj.weight": np.zeros((4, H), np.float32),
        "mlp.shared_expert.down_proj.weight": np.zeros((H, 4), np.float32),
        "mlp.shared_expert_gate.weight": np.zeros((1, H), np.float32),
    }


def _run_op(weights, x, *, normalize: int, fusion: int = 1) -> np.ndarray:
    gate, up = weights["mlp.experts.gate_proj.weight"], weights["mlp.experts.up_proj.weight"]
    fc1 = interleave_gate_up(gate, up) if fusion == 1 else np.concatenate([gate, up], axis=1)
    node = helper.make_node(
        "MoE", ["x", "logits", "fc1", "", "fc2"], ["y"], domain="com.microsoft", k=2, activation_type="swiglu",
        swiglu_fusion=fusion, normalize_routing_weights=normalize, activation_alpha=1.0, activation_beta=0.0,
    )
    graph = helper.make_graph(
        [node], "moe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, H]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, E])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, H])],
        initializer=[onnx.numpy_helper.from_array(fc1, "fc1"),
                     onnx.numpy_helper.from_array(weights["mlp.experts.down_proj.weight"], "fc2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=11)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = x @ weights["mlp.gate.weight"].T
    return session.run(None, {"x": x, "logits": logits})[0]


@pytest.mark.parametrize("normalize", [True, False])
def test_moe_op_routes_as_the_reference(weights, normalize):
    x = np.random.default_rng(4).standard_normal((TOKENS, H)).astype(np.float32)
    moe = MoeDims(E, 2, I, 4, normalize_top_k=normalize)
    expected = sparse_moe(_Weights(ArrayWeightStore(weights)), moe, "", x.astype(np.float64))
    got = _run_op(weights, x, normalize=int(normalize))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # And the two routings really differ on these inputs, so the attribute is what made it agree.
    other = sparse_moe(_Weights(ArrayWeightStore(weights)), MoeDims(E, 2, I, 4, normalize_top_k=not normalize), "",
                       x.astype(np.float64))
    assert np.abs(got - other).max() > 1e-2


def test_cpu_kernel_refuses_concatenated_gate_up(weights):
    x = np.zeros((1, H), np.float32)
    with pytest.raises(Exception, match="interleaved SwiGLU"):
        _run_op(weights, x, normalize=1, fusion=2)


def test_route_renormalizes_the_top_k_softmax():
    logits = np.log(np.array([[0.1, 0.4, 0.2, 0.3]]))
    top, w = route(logits, MoeDims(4, 2, 1, 1))
    assert top.tolist() == [[1, 3]]
    np.testing.assert_allclose(w, [[0.4 / 0.7, 0.3 / 0.7]])
