"""Re-quantizing a weight the source already stores block-quantized (a GGUF's Q6_K to int4 block 32,
a bits override on a GGUF source) works a chunk of rows at a time: the same bytes as dequantizing the
whole tensor first, in memory bounded by a fraction of the tensor's float32 size."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT

from mtpc.weights import quant
from mtpc.weights import store as weights
from mtpc.ir import QuantForm
from mtpc.weights.quant import materialize, materialized_chunks, quantize_linear
from mtpc.sources.gguf.quant import quantized_rows, to_quantized_tensor
from tests.sources.gguf_block_encoders import encode

FIELDS = ("data", "scales", "zero_points", "block_offsets")


def _raw(qtype: QT, n: int, k: int, seed: int = 3) -> np.ndarray:
    block, _ = GGML_QUANT_SIZES[qtype]
    raw, _ = encode(qtype, np.random.default_rng(seed), n * k // block, moderate=True)
    return raw.reshape(n, -1)


def _same(a, b) -> None:
    for field in FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None and y is None) or (x.dtype == y.dtype and np.array_equal(x, y)), field


# Q6_K and Q5_K (8 bits / 16 or 32) have no 4-bit block-32 form; Q8_0 has none at 4 bits; Q4_K is
# 4 / 32 with float zero points, so int4 block 64 re-quantizes it.
@pytest.mark.parametrize("qtype, form", [
    (QT.Q6_K, QuantForm(4, 32, False)),
    (QT.Q5_K, QuantForm(4, 32, True)),
    (QT.Q8_0, QuantForm(4, 32, False)),
    (QT.Q4_K, QuantForm(4, 64, False)),
    (QT.Q4_0, QuantForm(8, 32, False)),
])
def test_chunked_requantization_gives_the_whole_tensor_bytes(monkeypatch, qtype, form):
    n, k = 37, 512
    source = to_quantized_tensor(_raw(qtype, n, k), qtype, n, k)
    symmetric = not form.has_zero_points
    whole = quantize_linear(source.dequantize(), form.bits, form.block_size, symmetric=symmetric)
    monkeypatch.setattr(quant, "_CHUNK_ELEMENTS", 5 * k)  # five rows at a time, a ragged last chunk
    _same(materialize(source, form, symmetric=symmetric), whole)
    lazy = quantized_rows(_raw(qtype, n, k), qtype, n, k)  # converted from the blocks as rows are asked for
    _same(materialize(lazy, form, symmetric=symmetric), whole)
    chunks = list(materialized_chunks(lazy, form, symmetric=symmetric, rows=12))
    assert [c.shape[0] for c in chunks] == [10, 10, 10, 7]  # whole chunks of 5 rows, at most 12 asked
    for field in ("data", "scales", "zero_points"):
        parts = [getattr(c, field) for c in chunks]
        expected = getattr(whole, field)
        assert (expected is None and parts[0] is None) or np.array_equal(np.concatenate(parts), expected), field


def test_kept_blocks_come_out_whole_or_in_chunks_alike(monkeypatch):
    n, k = 29, 512
    raw = _raw(QT.Q5_K, n, k)
    whole = to_quantized_tensor(raw, QT.Q5_K, n, k)
    monkeypatch.setattr(weights, "_CONVERT_ELEMENTS", 4 * k)
    lazy = quantized_rows(raw, QT.Q5_K, n, k)
    _same(materialize(lazy, QuantForm(8, 32, False, block_offsets=True), symmetric=True), whole)
    chunks = list(lazy.chunks(6))
    assert whole.zero_points is None and whole.block_offsets is not None
    for field in ("data", "scales", "block_offsets"):
        assert np.array_equal(np.concatenate([getattr(c, field) for c in chunks]), getattr(whole, field)), field


def _peak(work) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_requantizing_holds_a_fraction_of_the_float32_tensor():
    n, k = 2048, 4096  # 32 MiB in float32
    raw = _raw(QT.Q6_K, n, k)  # the source's blocks, as a memory map would hold them: not counted
    float32_bytes = n * k * 4
    form = QuantForm(4, 32, False)
    lazy = quantized_rows(raw, QT.Q6_K, n, k)
    # The int4 result (1/8 of the float32 size, plus 1/32 of scales) and one chunk's temporaries
    # (about 4 MB whatever the tensor; measured 0.27x here, 0.38x at half the rows); no whole
    # float32 copy, no whole block-form copy of the source.
    chunked = _peak(lambda: materialize(lazy, form, symmetric=True))
    assert chunked < 0.35 * float32_bytes, chunked / float32_bytes
    # Streamed (the data file writes each chunk and lets it go): a few chunks (measured 0.11x).
    streamed = _peak(lambda: [None for _ in materialized_chunks(lazy, form, symmetric=True, rows=64)])
    assert streamed < 0.15 * float32_bytes, streamed / float32_bytes
    # What this replaces: the whole tensor dequantized, then quantized (measured 3.4x).
    whole = _peak(lambda: quantize_linear(to_quantized_tensor(raw, QT.Q6_K, n, k).dequantize(), 4, 32))
    assert whole > 2 * float32_bytes
