"""Asymmetric (zero-point) quantization from float, and quantizing in bounded memory.

The expected weights are computed here from the MatMulNBits definition (`w = (q - zp) * scale`,
codes and zero points packed low bits first), and onnxruntime's own kernel is run on the result.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from mtpc.weights import quant
from mtpc.weights.quant import quantize_linear

CASES = [(4, 32, 24, 64), (4, 32, 24, 80), (4, 16, 8, 40), (8, 32, 24, 80), (8, 64, 8, 128)]


def unpacked(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    flat = np.asarray(packed, np.uint8).reshape(packed.shape[0], -1)
    if bits == 8:
        return flat[:, :count]
    return np.stack([flat % 16, flat // 16], axis=-1).reshape(flat.shape[0], -1)[:, :count]


def weight_of(qt) -> np.ndarray:
    n, k = qt.shape
    k_blocks = qt.scales.shape[1]
    codes = unpacked(qt.data, qt.bits, k_blocks * qt.block_size).reshape(n, k_blocks, qt.block_size)
    zero_points = unpacked(qt.zero_points, qt.bits, k_blocks)
    w = (codes.astype(np.float64) - zero_points[..., None]) * qt.scales.astype(np.float64)[..., None]
    return w.reshape(n, -1)[:, :k]


def shifted_weight(n: int, k: int, seed: int) -> np.ndarray:
    """Blocks not centred on zero, where zero points pay off; a few exact zeros."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * 0.1 + rng.uniform(-1, 1, (n, 1))).astype(np.float32)
    w[0, :5] = 0.0
    return w


@pytest.mark.parametrize("bits, block_size, n, k", CASES)
def test_rounding_error_is_at_most_half_a_step_and_zero_stays_zero(bits, block_size, n, k):
    w = shifted_weight(n, k, seed=bits + k)
    qt = quantize_linear(w, bits, block_size, symmetric=False)
    assert qt.zero_points is not None and qt.zero_points.dtype == np.uint8
    step = np.repeat(qt.scales.astype(np.float64), block_size, axis=1)[:, :k]
    error = np.abs(weight_of(qt) - w)
    assert (error <= step / 2 * (1 + 1e-5) + 1e-12).all(), float((error / step).max())
    assert (weight_of(qt)[0, :5] == 0).all()


def test_zero_points_halve_the_error_of_off_centre_blocks():
    w = shifted_weight(16, 256, seed=5)
    sym = np.abs(quantize_linear(w, 4, 32).dequantize() - w).max()
    asym = np.abs(quantize_linear(w, 4, 32, symmetric=False).dequantize() - w).max()
    assert asym < sym / 2, (asym, sym)


@pytest.mark.parametrize("bits, block_size, n, k", CASES)
def test_onnxruntime_matmulnbits_with_zero_points_computes_x_times_the_weight(bits, block_size, n, k):
    qt = quantize_linear(shifted_weight(n, k, seed=2), bits, block_size, symmetric=False)
    inits = [
        onnx.numpy_helper.from_array(np.asarray(qt.data, np.uint8), "B"),
        onnx.numpy_helper.from_array(np.asarray(qt.scales, np.float32), "scales"),
        onnx.numpy_helper.from_array(np.asarray(qt.zero_points, np.uint8), "zp"),
    ]
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=bits, block_size=block_size, accuracy_level=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(3).standard_normal((5, k)).astype(np.float32)
    expected = x.astype(np.float64) @ weight_of(qt).T
    np.testing.assert_allclose(sess.run(None, {"A": x})[0], expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("symmetric", [True, False])
def test_chunked_quantization_equals_one_pass(monkeypatch, symmetric):
    w = shifted_weight(37, 96, seed=9)
    whole = quantize_linear(w, 4, 32, symmetric=symmetric)
    monkeypatch.setattr(quant, "_CHUNK_ELEMENTS", 96 * 5)  # five rows at a time, a ragged last chunk
    chunked = quantize_linear(w, 4, 32, symmetric=symmetric)
    for a, b in ((whole.data, chunked.data), (whole.scales, chunked.scales), (whole.zero_points, chunked.zero_points)):
        assert (a is None and b is None) or np.array_equal(a, b)


def test_quantizing_a_large_tensor_holds_about_the_tensor_and_its_result():
    w = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)  # 16 MiB
    tracemalloc.start()
    try:
        quantize_linear(w, 4, 32, symmetric=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Beyond the input: the packed result (1/8 of it, plus scales) and one chunk of temporaries.
    assert peak < 0.5 * w.nbytes, peak / w.nbytes
