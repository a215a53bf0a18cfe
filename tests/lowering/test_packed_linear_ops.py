"""The paged graphs' linear-attention ops need no lowering: onnxruntime 1.32 has CPU kernels for
VarlenCausalConvWithState and GatedDeltaNet (only PagedAttention is CUDA-only). These tests pin that
down and check the CPU kernels against the numpy implementations of the contracts on ragged packs,
before the paged-package tests rely on them."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from . import reference

ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
RAGGED = [[5, 1, 9], [1, 1, 1, 1], [3], [2, 7]]


def run_node(node, inputs, outputs, feeds):
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def cumulative(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


@pytest.mark.parametrize("lengths", RAGGED)
@pytest.mark.parametrize("kernel", [2, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_varlen_causal_conv_cpu_kernel_matches_the_contract(lengths, kernel, dtype):
    rng = np.random.default_rng(len(lengths) * 10 + kernel)
    channels, batch, n = 24, len(lengths), sum(lengths)
    feeds = {"x": rng.standard_normal((n, channels)).astype(dtype),
             "w": rng.standard_normal((channels, 1, kernel)).astype(dtype),
             "cu": cumulative(lengths),
             "state": rng.standard_normal((batch, channels, kernel - 1)).astype(dtype)}
    t = ELEM[dtype]
    node = helper.make_node("VarlenCausalConvWithState", ["x", "w", "cu", "", "state"], ["y", "final"],
                            domain="com.microsoft", activation="silu")
    y, final = run_node(node, [helper.make_tensor_value_info("x", t, ["n", channels]),
                               helper.make_tensor_value_info("w", t, [channels, 1, kernel]),
                               helper.make_tensor_value_info("cu", TensorProto.INT32, ["b1"]),
                               helper.make_tensor_value_info("state", t, ["b", channels, kernel - 1])],
                        [helper.make_tensor_value_info("y", t, ["n", channels]),
                         helper.make_tensor_value_info("final", t, ["b", channels, kernel - 1])], feeds)
    want_y, want_state = reference.varlen_causal_conv(feeds["x"], feeds["w"], feeds["cu"], feeds["state"])
    tol = 1e-5 if dtype is np.float32 else 2e-2
    np.testing.assert_allclose(y.astype(np.float64), want_y, atol=tol, rtol=0)
    # The carry state holds raw inputs: copied, never computed.
    np.testing.assert_array_equal(final, want_state.astype(dtype))


@pytest.mark.parametrize("lengths", RAGGED)
@pytest.mark.parametrize("key_heads, value_heads", [(2, 4), (2, 2), (1, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gated_delta_net_cpu_kernel_matches_the_contract(lengths, key_heads, value_heads, dtype):
    rng = np.random.default_rng(len(lengths) + key_heads * 7 + value_heads)
    dk, dv, batch, n = 8, 12, len(lengths), sum(lengths)

    def unit(shape):  # the delta rule needs L2-normalized keys
        x = rng.standard_normal(shape)
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(dtype)

    feeds = {"q": unit((n, key_heads, dk)), "k": unit((n, key_heads, dk)),
             "v": rng.standard_normal((n, value_heads, dv)).astype(dtype), "cu": cumulative(lengths),
             "decay": (-rng.random((n, value_heads))).astype(dtype),
             "beta": rng.random((n, value_heads)).astype(dtype),
             "state": rng.standard_normal((batch, value_heads, dv, dk)).astype(np.float32)}
    t = ELEM[dtype]
    node = helper.make_node("GatedDeltaNet", ["q", "k", "v", "cu", "decay", "beta", "state"], ["o", "final"],
                            domain="com.microsoft", scale=dk**-0.5, update_rule="gated_delta")
    o, final = run_node(node, [helper.make_tensor_value_info("q", t, ["n", key_heads, dk]),
                               helper.make_tensor_value_info("k", t, ["n", key_heads, dk]),
                               helper.make_tensor_value_info("v", t, ["n", value_heads, dv]),
                               helper.make_tensor_value_info("cu", TensorProto.INT32, ["b1"]),
                               helper.make_tensor_value_info("decay", t, ["n", value_heads]),
                               helper.make_tensor_value_info("beta", t, ["n", value_heads]),
                               helper.make_tensor_value_info("state", TensorProto.FLOAT, ["b", value_heads, dv, dk])],
                        [helper.make_tensor_value_info("o", t, ["n", value_heads, dv]),
                         helper.make_tensor_value_info("final", TensorProto.FLOAT, ["b", value_heads, dv, dk])], feeds)
    want_o, want_state = reference.gated_delta_net(feeds["q"], feeds["k"], feeds["v"], feeds["cu"], feeds["decay"],
                                                   feeds["beta"], feeds["state"], scale=dk**-0.5)
    tol = 1e-5 if dtype is np.float32 else 2e-2
    np.testing.assert_allclose(o.astype(np.float64), want_o, atol=tol, rtol=0)
    np.testing.assert_allclose(final, want_state, atol=1e-5 if dtype is np.float32 else 1e-2, rtol=0)


def test_paged_attention_has_no_cpu_kernel():
    # Why the lowering exists: if onnxruntime ever ships one, the lowering is no longer needed.
    from .test_paged_attention import one_node_model

    model = one_node_model(4, 2, 16, TensorProto.FLOAT16)
    with pytest.raises(Exception, match="PagedAttention"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


# ---- compact state updates: replaying the captured prefix rebuilds the state of fewer tokens

CAPACITY = 3


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_conv_state_update_replays_to_the_state_of_the_kept_prefix(dtype):
    rng = np.random.default_rng(21)
    lengths, capture = [4, 2, 5], [3, 1, 3]  # capture_count = drafts; the second is clamped by nothing
    channels, kernel, batch, n = 24, 4, 3, 11
    feeds = {"x": rng.standard_normal((n, channels)).astype(dtype),
             "w": rng.standard_normal((channels, 1, kernel)).astype(dtype), "cu": cumulative(lengths),
             "state": rng.standard_normal((batch, channels, kernel - 1)).astype(dtype),
             "capture": np.array(capture, np.int32)}
    t = ELEM[dtype]
    node = helper.make_node("VarlenCausalConvWithState", ["x", "w", "cu", "", "state", "capture"],
                            ["y", "final", "update"], domain="com.microsoft", activation="silu",
                            state_update_capacity=CAPACITY)
    _, _, update = run_node(node, [helper.make_tensor_value_info("x", t, ["n", channels]),
                                   helper.make_tensor_value_info("w", t, [channels, 1, kernel]),
                                   helper.make_tensor_value_info("cu", TensorProto.INT32, ["b1"]),
                                   helper.make_tensor_value_info("state", t, ["b", channels, kernel - 1]),
                                   helper.make_tensor_value_info("capture", TensorProto.INT32, ["b"])],
                            [helper.make_tensor_value_info("y", t, ["n", channels]),
                             helper.make_tensor_value_info("final", t, ["b", channels, kernel - 1]),
                             helper.make_tensor_value_info("update", t, ["b", CAPACITY, channels])], feeds)
    assert update.shape == (batch, CAPACITY, channels)
    starts = feeds["cu"]
    for b in range(batch):
        assert not update[b, capture[b]:].any()  # slots past the capture count are zero
        for kept in range(capture[b] + 1):
            first = slice(starts[b], starts[b] + kept)
            _, want = reference.varlen_causal_conv(feeds["x"][first], feeds["w"], np.array([0, kept]),
                                                   feeds["state"][b : b + 1])
            np.testing.assert_array_equal(reference.replay_conv(feeds["state"][b], update[b], kept), want[0])


@pytest.mark.parametrize("key_heads, value_heads", [(2, 4), (1, 3)])
def test_recurrent_state_update_replays_to_the_state_of_the_kept_prefix(key_heads, value_heads):
    rng = np.random.default_rng(22 + value_heads)
    lengths, capture = [4, 2, 5], [3, 1, 2]
    dk, dv, batch, n = 8, 12, 3, 11

    def unit(shape):
        x = rng.standard_normal(shape)
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    feeds = {"q": unit((n, key_heads, dk)), "k": unit((n, key_heads, dk)),
             "v": rng.standard_normal((n, value_heads, dv)).astype(np.float32), "cu": cumulative(lengths),
             "decay": (-rng.random((n, value_heads))).astype(np.float32),
             "beta": rng.random((n, value_heads)).astype(np.float32),
             "state": rng.standard_normal((batch, value_heads, dv, dk)).astype(np.float32),
             "capture": np.array(capture, np.int32), "active": np.array([1], np.int32)}
    f32 = TensorProto.FLOAT
    node = helper.make_node("GatedDeltaNet", ["q", "k", "v", "cu", "decay", "beta", "state", "", "", "capture",
                                              "active"], ["o", "final", "update"], domain="com.microsoft",
                            scale=dk**-0.5, update_rule="gated_delta", state_update_capacity=CAPACITY)
    width = CAPACITY * (value_heads + key_heads * dk + value_heads * dv)
    inputs = [helper.make_tensor_value_info(name, f32, None) for name in ("q", "k", "v")]
    inputs += [helper.make_tensor_value_info("cu", TensorProto.INT32, ["b1"])]
    inputs += [helper.make_tensor_value_info(name, f32, None) for name in ("decay", "beta", "state")]
    inputs += [helper.make_tensor_value_info("capture", TensorProto.INT32, ["b"]),
               helper.make_tensor_value_info("active", TensorProto.INT32, [1])]
    outputs = [helper.make_tensor_value_info("o", f32, None), helper.make_tensor_value_info("final", f32, None),
               helper.make_tensor_value_info("update", f32, ["b", width])]
    _, final, update = run_node(node, inputs, outputs, feeds)
    starts = feeds["cu"]
    for b in range(batch):
        for kept in range(capture[b] + 1):
            first = slice(starts[b], starts[b] + kept)
            _, want = reference.gated_delta_net(feeds["q"][first], feeds["k"][first], feeds["v"][first],
                                                np.array([0, kept]), feeds["decay"][first], feeds["beta"][first],
                                                feeds["state"][b : b + 1], scale=dk**-0.5)
            got = reference.replay_recurrent(feeds["state"][b], update[b], kept, capacity=CAPACITY, key_heads=key_heads)
            np.testing.assert_allclose(got, want[0], atol=1e-5, rtol=0)
        # Keeping every token is the op's own final state.
        np.testing.assert_allclose(final[b], reference.gated_delta_net(
            feeds["q"][starts[b]:starts[b + 1]], feeds["k"][starts[b]:starts[b + 1]], feeds["v"][starts[b]:starts[b + 1]],
            np.array([0, lengths[b]]), feeds["decay"][starts[b]:starts[b + 1]], feeds["beta"][starts[b]:starts[b + 1]],
            feeds["state"][b : b + 1], scale=dk**-0.5)[1][0], atol=1e-5, rtol=0)
    # Capture switched off: the capsule is zero-filled.
    _, _, idle = run_node(node, inputs, outputs, dict(feeds, active=np.array([0], np.int32)))
    assert not idle.any()
