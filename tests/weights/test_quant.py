"""Weight quantization for MatMulNBits, checked against the op's documented layout and the real kernel.

The expected values come from shared/reference/onnxruntime-ops.md §2 (the MatMulNBits layout:
`w = (q - zp) * scale`, default zero point 8 / 128, element 2i in the low nibble) and from running
onnxruntime's own MatMulNBits; the unpacking below is written here, not taken from mtpc.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from mtpc.ir import QuantScheme
from mtpc.weights.quant import QuantForm, quantize_linear, resolve, resolved_form
from mtpc.weights import QuantizedTensor, TensorInfo

# Symmetric round-to-nearest: the largest code offset from the zero point each width allows.
QMAX = {4: 7, 8: 127}
DEFAULT_ZERO_POINT = {4: 8, 8: 128}
# (bits, block_size, N, K): K = 80 and 40 leave a partial last block.
CASES = [(4, 32, 24, 64), (4, 32, 24, 80), (4, 16, 8, 40), (8, 32, 24, 80), (8, 16, 8, 48)]


def codes_of(qt: QuantizedTensor) -> np.ndarray:
    """`[N, k_blocks, block_size]` codes read off the packed bytes (low nibble first for 4 bits)."""
    n, _ = qt.shape
    data = np.asarray(qt.data, np.uint8)
    if qt.bits == 8:
        codes = data
    else:
        pairs = np.empty(data.shape + (2,), np.uint8)
        pairs[..., 0] = data % 16
        pairs[..., 1] = data // 16
        codes = pairs.reshape(data.shape[:-1] + (data.shape[-1] * 2,))
    return codes.reshape(n, -1, qt.block_size)


def dequantized(qt: QuantizedTensor) -> np.ndarray:
    assert qt.zero_points is None
    n, k = qt.shape
    zero = DEFAULT_ZERO_POINT[qt.bits]
    w = (codes_of(qt).astype(np.float64) - zero) * np.asarray(qt.scales, np.float64)[..., None]
    return w.reshape(n, -1)[:, :k]


def blocked(w: np.ndarray, block_size: int) -> np.ndarray:
    n, k = w.shape
    padded = np.zeros((n, -(-k // block_size) * block_size))
    padded[:, :k] = w
    return padded.reshape(n, -1, block_size)


def random_weight(n: int, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Per-row magnitudes spread over three decades, as real layers have.
    return (rng.standard_normal((n, k)) * 10.0 ** rng.uniform(-3, 0, (n, 1))).astype(np.float32)


@pytest.mark.parametrize("bits, block_size, n, k", CASES)
def test_layout_matches_matmulnbits(bits, block_size, n, k):
    qt = quantize_linear(random_weight(n, k), bits, block_size)
    k_blocks = -(-k // block_size)
    assert (qt.bits, qt.block_size, qt.shape) == (bits, block_size, (n, k))
    assert qt.data.dtype == np.uint8 and qt.data.shape == (n, k_blocks, block_size * bits // 8)
    assert qt.scales.shape == (n, k_blocks)
    assert qt.zero_points is None  # the op's default zero point, 2**(bits-1)


@pytest.mark.parametrize("bits, block_size, n, k", CASES)
def test_rounding_error_is_at_most_half_a_step(bits, block_size, n, k):
    w = random_weight(n, k, seed=bits + k)
    qt = quantize_linear(w, bits, block_size)
    scales = np.asarray(qt.scales, np.float64)
    np.testing.assert_allclose(scales, np.abs(blocked(w, block_size)).max(-1) / QMAX[bits], rtol=1e-6)
    step = np.repeat(scales, block_size, axis=1)[:, :k]
    error = np.abs(dequantized(qt) - w)
    assert (error <= step / 2 * (1 + 1e-5) + 1e-12).all(), float((error / step).max())


@pytest.mark.parametrize("bits, block_size, n, k", CASES)
def test_codes_stay_symmetric_around_the_default_zero_point(bits, block_size, n, k):
    w = random_weight(n, k, seed=1)
    codes = codes_of(quantize_linear(w, bits, block_size)).astype(np.int64)
    zero, qmax = DEFAULT_ZERO_POINT[bits], QMAX[bits]
    assert codes.min() >= zero - qmax and codes.max() <= zero + qmax <= 2**bits - 1
    # Each block's largest magnitude lands on the end of the range: the full range is used.
    largest = np.abs(blocked(w, block_size)).argmax(-1)
    assert (np.abs(np.take_along_axis(codes, largest[..., None], -1) - zero) == qmax).all()
    # The padding of a partial last block quantizes to the zero point.
    assert (codes.reshape(n, -1)[:, k:] == zero).all()


@pytest.mark.parametrize("bits", [4, 8])
def test_an_all_zero_block_gets_a_finite_scale_and_stays_zero(bits):
    w = random_weight(4, 64)
    w[1, :32] = 0.0
    w[3] = 0.0
    qt = quantize_linear(w, bits, 32)
    assert np.isfinite(qt.scales).all() and (qt.scales > 0).all()
    deq = dequantized(qt)
    assert (deq[1, :32] == 0).all() and (deq[3] == 0).all()
    assert (codes_of(qt)[3] == DEFAULT_ZERO_POINT[bits]).all()


def matmulnbits(x: np.ndarray, qt: QuantizedTensor) -> np.ndarray:
    n, k = qt.shape
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=qt.bits, block_size=qt.block_size, accuracy_level=0)
    graph = helper.make_graph(
        [node], "matmulnbits",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])],
        initializer=[onnx.numpy_helper.from_array(np.asarray(qt.data, np.uint8), "B"),
                     onnx.numpy_helper.from_array(np.asarray(qt.scales, np.float32), "scales")],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"A": x})[0]


@pytest.mark.parametrize("bits, block_size, n, k", CASES)
def test_onnxruntime_matmulnbits_computes_x_times_the_dequantized_weight(bits, block_size, n, k):
    qt = quantize_linear(random_weight(n, k, seed=2), bits, block_size)
    x = np.random.default_rng(3).standard_normal((5, k)).astype(np.float32)
    expected = x.astype(np.float64) @ dequantized(qt).T
    np.testing.assert_allclose(matmulnbits(x, qt), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("bits", [3, 16])
def test_unsupported_widths_are_refused(bits):
    with pytest.raises(ValueError, match="4 or 8 bits"):
        quantize_linear(np.ones((2, 32), np.float32), bits, 32)


# ---- resolve: what to store for one weight under a scheme ---------------------------------


@pytest.fixture
def source_q4():
    """A source-quantized weight (as GGUF Q4_0 arrives), built here from random codes, not by mtpc."""
    rng = np.random.default_rng(4)
    n, k, block = 6, 64, 32
    data = rng.integers(0, 256, (n, k // block, block // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, (n, k // block)).astype(np.float32)
    return QuantizedTensor(4, block, (n, k), data, scales, None, "Q4_0")


def test_keep_source_returns_a_quantized_source_as_is(source_q4):
    assert resolve(source_q4, QuantScheme(bits=8, block_size=64, keep_source=True)) is source_q4


def test_keep_source_keeps_a_float_source_as_float32():
    w = random_weight(4, 32).astype(np.float16)
    out = resolve(w, QuantScheme(bits=4, keep_source=True))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, w.astype(np.float32))


def test_same_bits_and_block_keeps_the_source_bytes(source_q4):
    data, scales = source_q4.data.copy(), source_q4.scales.copy()
    out = resolve(source_q4, QuantScheme(bits=4, block_size=32))
    assert out is source_q4
    np.testing.assert_array_equal(out.data, data)
    np.testing.assert_array_equal(out.scales, scales)


@pytest.mark.parametrize("bits, block_size", [(4, 64), (4, 16), (8, 32)])
def test_a_different_encoding_is_requantized_from_the_source_values(source_q4, bits, block_size):
    out = resolve(source_q4, QuantScheme(bits=bits, block_size=block_size))
    assert isinstance(out, QuantizedTensor)
    assert (out.bits, out.block_size, out.shape) == (bits, block_size, source_q4.shape)
    source_values = dequantized(source_q4)
    step = np.repeat(np.asarray(out.scales, np.float64), block_size, axis=1)
    assert (np.abs(dequantized(out) - source_values) <= step / 2 * (1 + 1e-5)).all()


def test_no_bits_dequantizes_to_float32(source_q4):
    out = resolve(source_q4, QuantScheme(bits=None))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == source_q4.shape
    np.testing.assert_allclose(out, dequantized(source_q4), rtol=1e-6, atol=0)


def test_no_bits_keeps_a_float_weight_float32():
    w = random_weight(4, 32)
    out = resolve(w.astype(np.float16), QuantScheme(bits=None))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, w.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("bits, block_size", [(4, 32), (8, 16)])
def test_a_float_weight_with_bits_is_quantized(bits, block_size):
    w = random_weight(6, 48)
    out = resolve(w, QuantScheme(bits=bits, block_size=block_size))
    assert isinstance(out, QuantizedTensor)
    assert (out.bits, out.block_size, out.shape) == (bits, block_size, (6, 48))
    step = np.repeat(np.asarray(out.scales, np.float64), block_size, axis=1)[:, :48]
    assert (np.abs(dequantized(out) - w) <= step / 2 * (1 + 1e-5) + 1e-12).all()


# ---- resolved_form: the form resolve gives, predicted from the tensor's metadata -----------

SCHEMES = [
    QuantScheme(bits=None),
    QuantScheme(bits=4, block_size=32),
    QuantScheme(bits=4, block_size=16),
    QuantScheme(bits=8, block_size=32),
    QuantScheme(bits=8, block_size=64, keep_source=True),
    QuantScheme(bits=None, keep_source=True),
]


def form_of(weight) -> QuantForm | None:
    if isinstance(weight, np.ndarray):
        return None
    return QuantForm(weight.bits, weight.block_size, weight.zero_points is not None)


@pytest.mark.parametrize("scheme", SCHEMES, ids=str)
def test_resolved_form_predicts_resolve_for_a_source_quantized_weight(source_q4, scheme):
    info = TensorInfo("w", source_q4.shape, "Q4_0", quantized=True, bits=4, block_size=32)
    assert resolved_form(info, scheme) == form_of(resolve(source_q4, scheme))


@pytest.mark.parametrize("scheme", SCHEMES, ids=str)
def test_resolved_form_predicts_resolve_for_a_float_weight(scheme):
    w = random_weight(6, 64)
    assert resolved_form(TensorInfo("w", w.shape, "float32"), scheme) == form_of(resolve(w, scheme))


def test_resolved_form_needs_the_encoding_of_a_quantized_tensor():
    with pytest.raises(AssertionError, match="bits and block size"):
        resolved_form(TensorInfo("w", (6, 64), "Q4_0", quantized=True), QuantScheme(bits=4, block_size=32))
