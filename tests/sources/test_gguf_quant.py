"""GGUF blocks -> onnxruntime's block-quantized layouts: the table of forms, the block decoders and the
arrays, against gguf-py's dequantizer (onnxruntime runs of every type: test_gguf_quant_ort.py)."""

from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize
from onnx import TensorProto, helper, numpy_helper

from mtpc.sources.gguf.blocks import FORMATS, decode
from mtpc.sources.gguf.quant import (
    ENCODINGS, GATHER, KERNEL_BITS, MATMUL, carry_over, error_bound, fits_float16, to_quantized_tensor,
)
from tests.sources.gguf_block_encoders import encode

N, K = 48, 512


def _weights(seed: int) -> np.ndarray:
    w = np.random.default_rng(seed).standard_normal((N, K)).astype(np.float32)
    w[0, :32] = -np.abs(w[0, :32])  # a block whose extreme is negative: Q4_0 stores a negative d
    return w


def _matmulnbits(x: np.ndarray, qt, *, zero_points: bool = False, level: int = 0) -> np.ndarray:
    inits = [numpy_helper.from_array(qt.data, "B"), numpy_helper.from_array(qt.scales.astype(np.float32), "scales")]
    if zero_points:
        inits.append(numpy_helper.from_array(qt.zero_points, "zp"))
    node = helper.make_node(
        "MatMulNBits", ["A", "B", "scales"] + ["zp"] * zero_points, ["Y"], domain="com.microsoft",
        K=K, N=N, bits=qt.bits, block_size=qt.block_size, accuracy_level=level,
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


# ---------------------------------------------------------------- every exactly-mapped type

TYPES = sorted(FORMATS, key=lambda t: t.name)

# (bits, block_size, MatMulNBits zero points, offset term); GatherBlockQuantized differs only where the
# MatMulNBits form uses float zero points: uint8 zero point 0 plus the offset term.
EXPECTED = {
    "Q4_0": (4, 32, "default", False), "Q8_0": (8, 32, "default", False), "Q5_0": (8, 32, "default", False),
    "Q4_1": (4, 32, "float", False), "Q5_1": (8, 32, "default", True),
    "Q2_K": (2, 16, "float", False), "Q3_K": (4, 16, "default", False), "Q4_K": (4, 32, "float", False),
    "Q5_K": (8, 32, "default", True), "Q6_K": (8, 16, "default", False),
    "TQ1_0": (2, 256, "default", False), "TQ2_0": (2, 256, "uint8", False),
    "IQ4_NL": (8, 32, "default", False), "IQ4_XS": (8, 32, "default", False),
    "MXFP4": (8, 32, "default", False), "NVFP4": (8, 16, "default", False),
}
NOT_MAPPED = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "Q8_1", "Q8_K", "BF16", "F16", "F32")


def test_the_table_of_forms():
    assert {t.name for t in FORMATS} == set(EXPECTED)
    for qtype in TYPES:
        mm, ga = carry_over(qtype, MATMUL), carry_over(qtype, GATHER)
        assert (mm.bits, mm.block_size, mm.zero_points, mm.block_offsets) == EXPECTED[qtype.name], qtype.name
        # MatMulNBits codes re-centred on each sub-block's offset: the 8-bit forms with an offset term.
        assert mm.centred == (qtype.name in ("Q5_1", "Q5_K")) and not ga.centred, qtype.name
        if mm.zero_points == "float":
            assert (ga.bits, ga.block_size, ga.zero_points, ga.block_offsets) == (mm.bits, mm.block_size, "uint8", True)
        else:
            assert ga == replace(mm, op=GATHER, centred=False)


def test_forms_stay_inside_what_the_cpu_kernels_take():
    for (qtype, op), form in ENCODINGS.items():
        assert form.bits in KERNEL_BITS and form.block_size in (16, 32, 64, 128, 256)
        if form.zero_points == "float":  # refused at 8 bits by MatMulNBits, never taken by GatherBlockQuantized
            assert op == MATMUL and form.bits < 8, qtype.name


@pytest.mark.parametrize("name", NOT_MAPPED)
def test_types_without_an_exact_form(name):
    qtype = QT[name]
    assert carry_over(qtype, MATMUL) is None and carry_over(qtype, GATHER) is None
    with pytest.raises(ValueError, match="no exact"):
        to_quantized_tensor(np.zeros((1, 256), np.uint8), qtype, 1, 256)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_block_decoder_is_bit_exact_with_gguf_py(qtype):
    block, size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(5)
    raw_random = rng.integers(0, 256, (8, 1024 // block * size), dtype=np.uint8)  # any bytes, inf/NaN included
    raw_encoded = encode(qtype, rng, 8 * 1024 // block)[0].reshape(8, -1)
    for raw in (raw_random, raw_encoded):
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(decode(raw, qtype, 8, 1024).value(), dequantize(raw, qtype))


@pytest.mark.parametrize("op", [MATMUL, GATHER])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_quantized_tensor_dequantizes_to_gguf_py(qtype, op):
    n, k = 16, 512
    block = GGML_QUANT_SIZES[qtype][0]
    raw, terms = encode(qtype, np.random.default_rng(6), n * k // block)
    raw, terms = raw.reshape(n, -1), terms.reshape(n, k)
    qt = to_quantized_tensor(raw, qtype, n, k, op)
    form = carry_over(qtype, op)
    k_blocks = k // form.block_size
    assert (qt.bits, qt.block_size, qt.shape, qt.source_type) == (form.bits, form.block_size, (n, k), qtype.name)
    assert qt.data.dtype == np.uint8 and qt.data.shape == (n, k_blocks, form.block_size * form.bits // 8)
    assert qt.scales.dtype == np.float32 and qt.scales.shape == (n, k_blocks)
    if form.zero_points == "float":
        assert qt.zero_points.dtype == np.float32 and qt.zero_points.shape == (n, k_blocks)
    elif form.zero_points == "uint8":
        assert qt.zero_points.dtype == np.uint8 and qt.zero_points.shape == (n, -(-k_blocks * form.bits // 8))
    else:
        assert qt.zero_points is None
    assert (qt.block_offsets is not None) == form.block_offsets
    if form.block_offsets:
        assert qt.block_offsets.dtype == np.float32 and qt.block_offsets.shape == (n, k_blocks)
    rel, _ = error_bound(form, np.float32)
    w = dequantize(raw, qtype)
    assert np.all(np.abs(qt.dequantize().astype(np.float64) - w) <= rel * terms)
    if form.zero_points != "float":
        np.testing.assert_array_equal(qt.dequantize(), w)


def _q4_1_block(d: float, m: float, codes) -> np.ndarray:
    q = np.asarray(codes)
    nib = (q[:16] | q[16:] << 4).astype(np.uint8)
    return np.concatenate([np.array([d, m], np.float16).view(np.uint8), nib])


def test_a_zero_scale_sub_block_keeps_its_constant():
    """Q4_1 `d = 0` is the constant `m`, which `scale * (q - z)` cannot hold: codes 0, scale -m, zero point 1."""
    raw = np.stack([_q4_1_block(0.0, 3.5, np.arange(32) % 16), _q4_1_block(0.25, -1.0, np.arange(32) % 16)])
    qt = to_quantized_tensor(raw.reshape(1, -1), QT.Q4_1, 1, 64)
    np.testing.assert_array_equal(qt.dequantize(), dequantize(raw.reshape(1, -1), QT.Q4_1))
    assert np.all(qt.dequantize()[0, :32] == 3.5)


def test_fits_float16_flags_scales_float16_cannot_hold():
    n, k = 8, 256
    raw, _ = encode(QT.Q6_K, np.random.default_rng(0), n * k // 256)  # block 5, case "max": d = 65504 overflows
    assert not fits_float16(to_quantized_tensor(raw.reshape(n, -1), QT.Q6_K, n, k))
    raw, _ = encode(QT.Q6_K, np.random.default_rng(0), n * k // 256, moderate=True)
    assert fits_float16(to_quantized_tensor(raw.reshape(n, -1), QT.Q6_K, n, k))


# ---------------------------------------------------------------- what the CPU default's int8 path multiplies

def _int8_path_weight(qt) -> np.ndarray:
    """`(q - zp) * scale`, what MatMulNBits at accuracy_level 4 multiplies its int8 activations by (the
    offset term is added in float, from the activations' exact block sums)."""
    from mtpc.weights.store import unpack_codes

    n, k = qt.shape
    q = unpack_codes(qt.data, qt.bits).reshape(n, -1, qt.block_size).astype(np.float64)
    if qt.zero_points is None:
        zp = np.full(qt.scales.shape, 2.0 ** (qt.bits - 1))
    else:
        zp = unpack_codes(qt.zero_points, qt.bits)[:, : qt.scales.shape[1]].astype(np.float64)
    return ((q - zp[..., None]) * qt.scales.astype(np.float64)[..., None]).reshape(n, k)


@pytest.mark.parametrize("qtype", [t for t in TYPES if carry_over(t, MATMUL).zero_points != "float"], ids=lambda t: t.name)
def test_the_int8_path_multiplies_by_the_weight_itself_within_half_a_step(qtype):
    """Activations rounded to int8 err by up to half their step, and that error is multiplied by what the int8
    path multiplies: llama.cpp multiplies by the weight itself, and so must the stored form, up to half of
    its own step (the offset term takes the rest). Stored as plain codes 0..31 plus the offset, Q5_K / Q5_1
    multiplied up to 31 steps where the weight was near 0, and doubled their error at the CPU default."""
    n, k = 16, 512
    block = GGML_QUANT_SIZES[qtype][0]
    raw, _ = encode(qtype, np.random.default_rng(8), n * k // block)
    raw = raw.reshape(n, -1)
    qt = to_quantized_tensor(raw, qtype, n, k)
    weight = dequantize(raw, qtype).astype(np.float64)
    half_step = np.repeat(np.abs(qt.scales.astype(np.float64)), qt.block_size, axis=-1) / 2
    assert np.all(np.abs(_int8_path_weight(qt)) <= np.abs(weight) + half_step)


@pytest.mark.parametrize("qtype", [t for t in TYPES if carry_over(t, MATMUL).zero_points == "float"], ids=lambda t: t.name)
def test_float_zero_points_compute_in_float_at_the_cpu_default(qtype):
    """Measured (onnxruntime 1.32): MatMulNBits with float zero points takes no int8 path at accuracy_level 4,
    so Q4_K, Q4_1 and Q2_K lose nothing to it (the output is level 0's, bit for bit)."""
    block = GGML_QUANT_SIZES[qtype][0]
    raw, _ = encode(qtype, np.random.default_rng(9), N * K // block, moderate=True)
    qt = to_quantized_tensor(raw.reshape(N, -1), qtype, N, K)
    x = np.random.default_rng(10).standard_normal((5, K)).astype(np.float32)
    np.testing.assert_array_equal(_matmulnbits(x, qt, zero_points=True, level=4), _matmulnbits(x, qt, zero_points=True))


@pytest.mark.parametrize("qtype", [t for t in TYPES if carry_over(t, MATMUL).zero_points != "float"
                                   and carry_over(t, MATMUL).bits in (4, 8)], ids=lambda t: t.name)
def test_the_cpu_defaults_int8_path_is_the_one_modelled_above(qtype):
    """What makes `(q - zp) * scale` the quantity to keep small, measured: MatMulNBits at level 4 rounds each
    block of the activations (the weight's block size) to int8 with step `amax / 127`, then multiplies by it."""
    block = GGML_QUANT_SIZES[qtype][0]
    raw, _ = encode(qtype, np.random.default_rng(11), N * K // block, moderate=True)
    qt = to_quantized_tensor(raw.reshape(N, -1), qtype, N, K)
    x = np.random.default_rng(12).standard_normal((5, K)).astype(np.float32)
    blocks = x.reshape(5, -1, qt.block_size)
    step = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    rounded = (np.rint(blocks / step) * step).reshape(5, K).astype(np.float64)
    int8_path = _int8_path_weight(qt)
    expected = rounded @ int8_path.T  # the op alone: an offset term is the graph's, added in float
    accumulation = K * 2.0**-24 * (np.abs(rounded) @ np.abs(int8_path).T)
    assert np.all(np.abs(_matmulnbits(x, qt, level=4) - expected) <= accumulation)
