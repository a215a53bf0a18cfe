"""GGUF Q4_0 / Q8_0 blocks -> MatMulNBits layout, bit-exact.

Both formats are symmetric with 32-element blocks and one fp16 scale `d`, so
they map onto MatMulNBits with `scale = d` and the op's default zero point
(`2**(bits-1)`): Q4_0 value `d*(q-8)`, Q8_0 value `d*q` = `d*((q+128)-128)`.
Only the nibble order differs for Q4_0: GGUF keeps element j in the low and
element j+16 in the high nibble of byte j, MatMulNBits packs elements 2i / 2i+1
into the low / high nibble of byte i.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT

from ..weights import QuantizedTensor

BLOCK = 32
_BLOCK_BYTES = {QT.Q4_0: 18, QT.Q8_0: 34}

REPACKABLE = frozenset(_BLOCK_BYTES)


def to_quantized_tensor(raw: np.ndarray, qtype: QT, n: int, k: int) -> QuantizedTensor:
    """`raw` is GGUFReader's uint8 view `[N, K/32 * block_bytes]` of an `[N, K]` weight."""
    block_bytes = _BLOCK_BYTES[qtype]
    blocks = np.asarray(raw, dtype=np.uint8).reshape(n, k // BLOCK, block_bytes)
    scales = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
    payload = blocks[..., 2:]
    if qtype == QT.Q4_0:
        codes = np.concatenate([payload & 0x0F, payload >> 4], axis=-1)  # elements in order 0..31
        data = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
        bits = 4
    else:
        data = (payload.view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        bits = 8
    return QuantizedTensor(bits, BLOCK, (n, k), np.ascontiguousarray(data), scales, None, qtype.name)
