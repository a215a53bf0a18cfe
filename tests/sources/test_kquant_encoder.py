"""The test-side k-quant encoders (tests/fixtures/kquant_encoder.py) against gguf-py's dequantizer."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

from tests.fixtures.kquant_encoder import K_QUANTS, quantize, step

N, K = 24, 512
# RMS error / RMS weight on N(0, 1) rows, a little above what each grid gives (measured 0.080, 0.039, 0.0196):
# a uniform error of half a step, steps of range/15, range/31 (32-element sub-blocks), amax/31 (16 elements).
RELATIVE_RMS = {QT.Q4_K: 0.09, QT.Q5_K: 0.045, QT.Q6_K: 0.022}


def _weights(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((N, K)).astype(np.float32)
    w[0] = 0.0  # all zero: d = dmin = 0
    w[1, :256] = np.abs(w[1, :256]) + 0.5  # all positive: mins 0
    w[2, :256] = -np.abs(w[2, :256]) - 0.5  # all negative: only mins reach the values
    w[3, :32] = 0.25  # a constant sub-block among varied ones (Q4_K: sc may be 0, value -dmin*m)
    w[4, 32:64] = 0.0  # a zero sub-block (two for Q6_K)
    w[5] *= 1e-3  # small scales (fp16 d subnormal-adjacent)
    w[6] *= 300.0  # large ones
    return w


@pytest.mark.parametrize("qtype", K_QUANTS, ids=lambda q: q.name)
def test_gguf_py_dequantizes_the_blocks_within_half_a_step(qtype):
    w = _weights(1)
    raw = quantize(w, qtype)
    assert raw.dtype == np.uint8 and raw.shape == (N, K // 256 * GGML_QUANT_SIZES[qtype][1])
    got = dequantize(raw, qtype).astype(np.float64)
    assert got.shape == (N, K)
    err = np.abs(got - w)
    slack = 1e-6 * (np.abs(w) + step(raw, qtype) * 64)  # float32 rounding of gguf-py's products
    assert (err <= step(raw, qtype) / 2 + slack).all(), float((err - step(raw, qtype) / 2).max())
    np.testing.assert_array_equal(got[0], 0.0)
    np.testing.assert_array_equal(got[4, 32:64], 0.0)


@pytest.mark.parametrize("qtype", K_QUANTS, ids=lambda q: q.name)
def test_the_grid_is_fine_enough(qtype):
    w = np.random.default_rng(2).standard_normal((64, 1024))
    got = dequantize(quantize(w, qtype), qtype)
    rel = np.sqrt(np.mean((got - w) ** 2) / np.mean(w**2))
    assert rel < RELATIVE_RMS[qtype], rel


def test_rows_not_a_multiple_of_256_are_refused():
    with pytest.raises(ValueError, match="multiple of 256"):
        quantize(np.zeros((4, 128)), QT.Q4_K)
