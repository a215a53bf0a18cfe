"""GGUF carry-over converts row chunks (bounded memory): the result equals converting in one pass."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from mtpc.weights import store as weights
from mtpc.sources.gguf import quant as gguf_quant
from mtpc.sources.gguf.quant import to_quantized_tensor
from tests.sources.gguf_block_encoders import encode

N, K = 13, 512


# Float zero points, uint8 zero points, a block offset, and the plain default zero point.
@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.TQ2_0, QT.Q5_1, QT.Q6_K, QT.Q4_0, QT.Q8_0])
def test_row_chunks_give_the_one_pass_result(monkeypatch, qtype):
    from gguf import GGML_QUANT_SIZES

    block, _ = GGML_QUANT_SIZES[qtype]
    raw, _ = encode(qtype, np.random.default_rng(4), N * K // block, moderate=True)
    raw = raw.reshape(N, -1)
    whole = to_quantized_tensor(raw, qtype, N, K)
    monkeypatch.setattr(weights, "_CONVERT_ELEMENTS", 3 * K)  # three rows at a time, a ragged last chunk
    chunked = to_quantized_tensor(raw, qtype, N, K)
    for field in ("data", "scales", "zero_points", "block_offsets"):
        a, b = getattr(whole, field), getattr(chunked, field)
        assert (a is None and b is None) or np.array_equal(a, b), field


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q8_0])
def test_bytewise_conversion_gives_the_general_paths_bytes(monkeypatch, qtype):
    """Q4_0 / Q8_0 are converted by byte operations; the general decode-and-pack path is the reference."""
    from gguf import GGML_QUANT_SIZES

    block, _ = GGML_QUANT_SIZES[qtype]
    raw, _ = encode(qtype, np.random.default_rng(7), N * K // block)  # every edge case, all-zero-code blocks too
    blocks = raw.reshape(-1, raw.shape[-1])
    blocks[1::5, 2:] = 0x88 if qtype == QT.Q4_0 else 0  # every code 0 under a nonzero scale: stored scale 0
    raw = raw.reshape(N, -1)
    fast = to_quantized_tensor(raw, qtype, N, K)
    monkeypatch.delitem(gguf_quant._BYTEWISE, qtype)
    general = to_quantized_tensor(raw, qtype, N, K)
    assert np.count_nonzero(general.scales == 0) >= N * K // block // 5
    for field in ("data", "scales", "zero_points", "block_offsets"):
        a, b = getattr(fast, field), getattr(general, field)
        assert (a is None and b is None) or (a.dtype == b.dtype and np.array_equal(a, b)), field
