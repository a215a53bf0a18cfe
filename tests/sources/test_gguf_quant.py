"""GGUF Q4_0 / Q8_0 -> MatMulNBits: bit-exact against gguf-py's dequantizer and exact on onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize
from onnx import TensorProto, helper, numpy_helper

from mtpc.sources.gguf_quant import to_quantized_tensor

N, K = 48, 512


def _weights(seed: int) -> np.ndarray:
    w = np.random.default_rng(seed).standard_normal((N, K)).astype(np.float32)
    w[0, :32] = -np.abs(w[0, :32])  # a block whose extreme is negative: Q4_0 stores a negative d
    return w


def _matmulnbits(x: np.ndarray, qt) -> np.ndarray:
    inits = [numpy_helper.from_array(qt.data, "B"), numpy_helper.from_array(qt.scales.astype(np.float32), "scales")]
    node = helper.make_node(
        "MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
        K=K, N=N, bits=qt.bits, block_size=qt.block_size, accuracy_level=0,
    )
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, N])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"A": x})[0]


@pytest.mark.parametrize("qtype,bits", [(QT.Q4_0, 4), (QT.Q8_0, 8)])
def test_repacked_blocks_dequantize_bit_exact(qtype, bits):
    raw = quantize(_weights(1), qtype)
    qt = to_quantized_tensor(raw, qtype, N, K)
    assert (qt.bits, qt.block_size, qt.shape, qt.zero_points, qt.source_type) == (bits, 32, (N, K), None, qtype.name)
    assert qt.data.shape == (N, K // 32, 32 * bits // 8) and qt.scales.shape == (N, K // 32)
    np.testing.assert_array_equal(qt.dequantize(), dequantize(raw, qtype))


def test_q4_0_fixture_really_has_negative_scales():
    raw = quantize(_weights(1), QT.Q4_0)
    d = raw.reshape(N, K // 32, 18)[..., :2].copy().view(np.float16)
    assert (d < 0).any()


def test_q4_0_nibbles_are_reordered_not_copied():
    raw = quantize(_weights(2), QT.Q4_0)
    qt = to_quantized_tensor(raw, QT.Q4_0, N, K)
    assert not np.array_equal(qt.data, raw.reshape(N, K // 32, 18)[..., 2:])
    # element 1 of block 0 sits in the high nibble of byte 0 (ORT), the low nibble of byte 1 (GGUF)
    assert qt.data[0, 0, 0] >> 4 == raw[0, 3] & 0x0F


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q8_0])
def test_matmulnbits_matches_dequantized_weight(qtype):
    raw = quantize(_weights(3), qtype)
    qt = to_quantized_tensor(raw, qtype, N, K)
    x = np.random.default_rng(4).standard_normal((5, K)).astype(np.float32)
    expected = x.astype(np.float64) @ dequantize(raw, qtype).astype(np.float64).T
    got = _matmulnbits(x, qt)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
