"""Acceptance: every exactly-mapped GGUF type, run through onnxruntime, equals gguf-py's dequantization.

Blocks come from the test-side encoder (edge cases included), the oracle is
`gguf.quants.dequantize`, and the bounds are `gguf_quant.error_bound`'s derived ones,
0 for most forms in float32. Three checks per type and scale dtype:

- the weight the graph applies (MatMulNBits, plus the offset subgraph, on one-hot rows)
  is within the per-element bound: the tight check;
- `x @ W_deq.T` on random activations, within the weight bound plus the accumulation
  bound of the summations the graph does;
- GatherBlockQuantized (plus the gathered offsets) returns the rows within the bound.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize
from onnx import TensorProto, helper, numpy_helper

from mtpc.sources.gguf.blocks import FORMATS
from mtpc.sources.gguf.quant import (
    GATHER, MATMUL, U16, U32, carry_over, error_bound, fits_float16, pack, to_quantized_tensor,
)
from tests.sources.gguf_block_encoders import encode

N, K, M = 32, 512, 4
TYPES = sorted(FORMATS, key=lambda t: t.name)
DTYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
MIN_TYPES = [t for t in TYPES if FORMATS[t][0].has_offset and carry_over(t, MATMUL).zero_points == "float"]


def _gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


def _fixture(qtype, dtype, seed=0):
    """(raw [N, bytes], W_deq float64 [N, K], T [N, K]): float16 graphs get the moderate encoder."""
    block = GGML_QUANT_SIZES[qtype][0]
    raw, terms = encode(qtype, np.random.default_rng(seed), N * K // block, moderate=dtype == np.float16)
    raw = raw.reshape(N, -1)
    return raw, dequantize(raw, qtype).astype(np.float64), terms.reshape(N, K)


def _session(nodes, inputs, output_type, inits, width):
    output = helper.make_tensor_value_info("Y", output_type, [None, width])
    graph = helper.make_graph(nodes, "g", inputs, [output], inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _params(qt, dtype):
    """Initializers: scales, float zero points and offsets in the graph dtype."""
    inits = [numpy_helper.from_array(qt.scales.astype(dtype), "scales")]
    if qt.zero_points is not None:
        zp = qt.zero_points.astype(dtype) if qt.zero_points.dtype.kind == "f" else qt.zero_points
        inits.append(numpy_helper.from_array(zp, "zp"))
    return inits


def matmul_session(qt, dtype):
    """MatMulNBits; with block offsets `+ MatMul(ReduceSum(Reshape(A, [-1, kb, bs]), -1), O^T)`."""
    kb = K // qt.block_size
    inits = [numpy_helper.from_array(qt.data, "B")] + _params(qt, dtype)
    ins = ["A", "B", "scales"] + (["zp"] if qt.zero_points is not None else [])
    out = "Y" if qt.block_offsets is None else "Y0"
    nodes = [helper.make_node("MatMulNBits", ins, [out], domain="com.microsoft",
                              K=K, N=N, bits=qt.bits, block_size=qt.block_size, accuracy_level=0)]
    if qt.block_offsets is not None:
        inits += [
            numpy_helper.from_array(np.array([-1, kb, qt.block_size], np.int64), "blocks_shape"),
            numpy_helper.from_array(np.array([-1], np.int64), "last"),
            numpy_helper.from_array(np.ascontiguousarray(qt.block_offsets.T).astype(dtype), "offsets_t"),
        ]
        nodes += [
            helper.make_node("Reshape", ["A", "blocks_shape"], ["A_blocks"]),
            helper.make_node("ReduceSum", ["A_blocks", "last"], ["A_block_sums"], keepdims=0),
            helper.make_node("MatMul", ["A_block_sums", "offsets_t"], ["Y1"]),
            helper.make_node("Add", ["Y0", "Y1"], ["Y"]),
        ]
    return _session(nodes, [helper.make_tensor_value_info("A", DTYPES[dtype], [None, K])], DTYPES[dtype], inits, N)


def gather_session(qt, dtype):
    """GatherBlockQuantized (zero points always written); with offsets `+ Unsqueeze(Gather(O, ids), -1)`."""
    kb = K // qt.block_size
    zp = qt.zero_points
    if zp is None:  # explicit: the default differs between execution providers
        zp = pack(np.full((N, kb), 2 ** (qt.bits - 1), np.uint8), qt.bits)
    assert zp.dtype == np.uint8, "GatherBlockQuantized takes integer zero points only"
    inits = [
        numpy_helper.from_array(qt.data.reshape(N, -1), "data"),
        numpy_helper.from_array(qt.scales.astype(dtype), "scales"),
        numpy_helper.from_array(zp, "zp"),
    ]
    out = "Y" if qt.block_offsets is None else "E"
    nodes = [helper.make_node("GatherBlockQuantized", ["data", "ids", "scales", "zp"], [out], domain="com.microsoft",
                              bits=qt.bits, block_size=qt.block_size, gather_axis=0, quantize_axis=1)]
    if qt.block_offsets is not None:
        inits += [
            numpy_helper.from_array(qt.block_offsets.astype(dtype), "offsets"),
            numpy_helper.from_array(np.array([-1, kb, qt.block_size], np.int64), "blocks_shape"),
            numpy_helper.from_array(np.array([-1, K], np.int64), "rows_shape"),
            numpy_helper.from_array(np.array([-1], np.int64), "last"),
        ]
        nodes += [
            helper.make_node("Reshape", ["E", "blocks_shape"], ["E_blocks"]),
            helper.make_node("Gather", ["offsets", "ids"], ["O_rows"], axis=0),
            helper.make_node("Unsqueeze", ["O_rows", "last"], ["O_cols"]),
            helper.make_node("Add", ["E_blocks", "O_cols"], ["E_sum"]),
            helper.make_node("Reshape", ["E_sum", "rows_shape"], ["Y"]),
        ]
    return _session(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [None])], DTYPES[dtype], inits, K)


def graph_weight(qt, dtype) -> np.ndarray:
    """The weight the MatMulNBits graph applies: its output on the rows of the identity."""
    return matmul_session(qt, dtype).run(None, {"A": np.eye(K, dtype=dtype)})[0].T.astype(np.float64)


def assert_within(got, want, bound, what):
    err = np.abs(got - want)
    bad = ~(err <= bound)  # NaN fails too
    assert not bad.any(), f"{what}: {bad.sum()} elements over the bound, worst err {err.max():.3g} vs bound at it " \
                          f"{bound.flat[np.argmax(err)]:.3g}"


def _converted(qtype, dtype, op, seed=0):
    raw, w, terms = _fixture(qtype, dtype, seed)
    qt = to_quantized_tensor(raw, qtype, N, K, op)
    if dtype == np.float16:
        assert fits_float16(qt), "the moderate encoder stays inside the float16 bound's domain"
    rel, ab = error_bound(carry_over(qtype, op), dtype)
    return qt, w, terms, rel * terms + ab


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_matmulnbits_weight_within_bound(qtype, dtype):
    qt, w, _, bound = _converted(qtype, dtype, MATMUL)
    assert_within(graph_weight(qt, dtype), w, bound, f"{qtype.name} {np.dtype(dtype).name}")
    if dtype == np.float32 and carry_over(qtype).zero_points != "float":
        np.testing.assert_array_equal(graph_weight(qt, dtype), w)  # bound 0: bit-exact


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_matmulnbits_matches_x_times_dequantized(qtype, dtype):
    qt, w, terms, bound = _converted(qtype, dtype, MATMUL)
    x = np.random.default_rng(7).standard_normal((M, K)).astype(dtype)
    got = matmul_session(qt, dtype).run(None, {"A": x})[0].astype(np.float64)
    ax = np.abs(x.astype(np.float64))
    mag = ax @ (terms + bound).T  # bounds |sum| of every partial sum the graph forms
    kb = K // qt.block_size
    # Summations: MatMulNBits over K (float32 inside, also for float16 A: onnxruntime x86-64 CPU),
    # ReduceSum over a block, MatMul over blocks and the Add (in the graph dtype), the output rounding.
    u = U32 if dtype == np.float32 else U16
    acc = _gamma(K + 1, U32) + (U16 if dtype == np.float16 else 0)
    if qt.block_offsets is not None:
        acc += _gamma(qt.block_size + kb + 1, u)
    expected = x.astype(np.float64) @ w.T
    assert_within(got, expected, ax @ bound.T + acc * mag + _gamma(K, 2.0**-53) * mag, qtype.name)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_gatherblockquantized_rows_within_bound(qtype, dtype):
    qt, w, _, bound = _converted(qtype, dtype, GATHER)
    ids = np.array([0, 5, N - 1, 5, 17, 2], np.int64)
    got = gather_session(qt, dtype).run(None, {"ids": ids})[0].astype(np.float64)
    assert_within(got, w[ids], bound[ids], f"{qtype.name} {np.dtype(dtype).name}")
    if dtype == np.float32:
        np.testing.assert_array_equal(got, w[ids])  # integer zero points only: bound 0


@pytest.mark.parametrize("qtype", MIN_TYPES, ids=lambda t: t.name)
def test_gather_form_is_a_bit_exact_matmulnbits_form_too(qtype):
    """uint8 zero point 0 plus the offset term: exact where the float zero point is not always."""
    qt, w, _, _ = _converted(qtype, np.float32, GATHER)
    np.testing.assert_array_equal(graph_weight(qt, np.float32), w)


@pytest.mark.parametrize("qtype", MIN_TYPES, ids=lambda t: t.name)
def test_float_zero_points_are_mostly_exact_and_never_over_the_bound(qtype):
    """Measured, onnxruntime 1.32 x86-64: fl(z*scale) == -offset for ~94% of sub-blocks, so most weights are
    bit-exact and the rest are a few float32 ulps of T off (the bound is gamma_5(u32) * T)."""
    qt, w, terms, bound = _converted(qtype, np.float32, MATMUL)
    got = graph_weight(qt, np.float32)
    assert np.mean(got == w) > 0.9
    assert np.max(np.abs(got - w) / np.where(terms > 0, terms, 1)) <= 4 * U32


def test_a_one_ulp_scale_error_fails_the_weight_check():
    """The bit-exact check is not vacuous: nudging one scale by one float32 ulp is caught."""
    qt, w, _, bound = _converted(QT.Q6_K, np.float32, MATMUL)
    live = np.argwhere(qt.scales != 0)[7]
    scales = qt.scales.copy()
    scales[tuple(live)] = np.nextafter(scales[tuple(live)], np.float32(np.inf))
    bad = type(qt)(qt.bits, qt.block_size, qt.shape, qt.data, scales, qt.zero_points, qt.source_type, qt.block_offsets)
    with pytest.raises(AssertionError, match="over the bound"):
        assert_within(graph_weight(bad, np.float32), w, bound, "nudged")


def test_dropping_the_offset_term_fails():
    qt, w, _, bound = _converted(QT.Q5_K, np.float32, MATMUL)
    bad = type(qt)(qt.bits, qt.block_size, qt.shape, qt.data, qt.scales, qt.zero_points, qt.source_type, None)
    with pytest.raises(AssertionError, match="over the bound"):
        assert_within(graph_weight(bad, np.float32), w, bound, "no offsets")


@pytest.mark.parametrize("qtype", MIN_TYPES, ids=lambda t: t.name)
def test_quantized_tensor_dequantize_is_the_kernels_weight(qtype):
    """`QuantizedTensor.dequantize` models the float-zero-point kernel as fl(q*s) - fl(z*s): bit-exact."""
    qt, _, _, _ = _converted(qtype, np.float32, MATMUL)
    np.testing.assert_array_equal(graph_weight(qt, np.float32), qt.dequantize())


def _bare_matmulnbits(bits, zero_points):
    kb = K // 32
    inits = [numpy_helper.from_array(np.zeros((N, kb, 32 * bits // 8), np.uint8), "B"),
             numpy_helper.from_array(np.ones((N, kb), np.float32), "scales"),
             numpy_helper.from_array(zero_points, "zp")]
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp"], ["Y"], domain="com.microsoft",
                            K=K, N=N, bits=bits, block_size=32)
    return _session([node], [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, K])],
                    TensorProto.FLOAT, inits, N)


@pytest.mark.parametrize("bits", [3, 5, 6])
def test_cpu_matmulnbits_refuses_other_widths(bits):
    with pytest.raises(Exception, match="Only 2b, 4b and 8b"):
        _bare_matmulnbits(bits, np.zeros((N, K // 32), np.uint8))


def test_cpu_matmulnbits_refuses_float_zero_points_at_8_bits_only():
    with pytest.raises(Exception, match="8-bit weights with floating-point zero points"):
        _bare_matmulnbits(8, np.zeros((N, K // 32), np.float32))
    for bits in (2, 4):
        _bare_matmulnbits(bits, np.zeros((N, K // 32), np.float32))
