"""GGUF carry-over converts row chunks (bounded memory): the result equals converting in one pass."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from mtpc import weights
from mtpc.sources.gguf_quant import to_quantized_tensor
from tests.sources.gguf_block_encoders import encode

N, K = 13, 512


# Float zero points, uint8 zero points, a block offset, and the plain default zero point.
@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.TQ2_0, QT.Q5_1, QT.Q6_K])
def test_row_chunks_give_the_one_pass_result(monkeypatch, qtype):
    from gguf import GGML_QUANT_SIZES

    block, _ = GGML_QUANT_SIZES[qtype]
    raw, _ = encode(qtype, np.random.default_rng(4), N * K // block, moderate=True)
    raw = raw.reshape(N, -1)
    whole = to_quantized_tensor(raw, qtype, N, K)
    monkeypatch.setattr(weights, "_WHOLE_CHUNK_ELEMENTS", 3 * K)  # three rows at a time, a ragged last chunk
    chunked = to_quantized_tensor(raw, qtype, N, K)
    for field in ("data", "scales", "zero_points", "block_offsets"):
        a, b = getattr(whole, field), getattr(chunked, field)
        assert (a is None and b is None) or np.array_equal(a, b), field
