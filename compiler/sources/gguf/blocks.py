"""GGUF block layouts -> integer codes, per-sub-block scales and offsets.

Every type decoded here dequantizes, in gguf-py's `quants.py`, as

    w = scale * code + offset        (float32; `offset` only where the type has mins)

with an integer `code` in a small range, one `scale` (and `offset`) per sub-block,
and `scale * code` **exact** in float32: the scale is an fp16 `d` (11 significant
bits), `d` times a small integer (K-quant sub-scales: at most 11 + 7 bits), an
e8m0 power of two (MXFP4) or a ue4m3 value (NVFP4), and the code needs at most
7 more bits, so every product fits float32's 24. gguf-py's only rounding is
therefore the `+ offset` (`d*q + m` for Q4_1/Q5_1, `d*sc*q - dmin*m` for K-quants).
`Decoded.value()` repeats that computation and is bit-exact with
`gguf.quants.dequantize` (tests/sources/test_gguf_blocks.py).

Layouts follow gguf-py 0.19.0 `quants.py` (the oracle), which follows llama.cpp's
`ggml-quants.c`. The K-quant 6-bit (scale, min) packing is gguf-py's
`Q4_K.get_scale_min`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

from ...util.lazy_import import lazy_module
from .constants import GGML_QUANT_SIZES, GGMLQuantizationType as QT

# Imported when a block is first decoded: describing a GGUF (the metadata verbs) reads only `FORMATS`.
np = lazy_module("numpy")


@dataclass(frozen=True)
class BlockFormat:
    """What a GGUF type's dequantization formula looks like, known without reading data."""

    qtype: QT
    sub_block: int  # elements sharing one scale (and offset)
    code_min: int
    code_max: int
    has_offset: bool  # w = scale*code + offset, the offset varying per sub-block
    scale_is_fp16: bool  # the scale is the block's fp16 `d` itself (exact in float16)
    offset_is_fp16: bool = False  # the offset is an fp16 field itself (Q4_1 / Q5_1 `m`)

    @property
    def source_bits_per_weight(self) -> float:
        block, size = GGML_QUANT_SIZES[self.qtype]
        return size * 8 / block


@dataclass(frozen=True)
class Decoded:
    """`[N, K]` weight as codes int16 `[N, n_sub, sub_block]`, scales / offsets float32 `[N, n_sub]`."""

    codes: np.ndarray
    scales: np.ndarray
    offsets: np.ndarray | None

    def value(self) -> np.ndarray:
        """gguf-py's dequantization, `[N, K]` float32."""
        w = self.codes.astype(np.float32) * self.scales[..., None]
        if self.offsets is not None:
            w = w + self.offsets[..., None]
        return w.reshape(w.shape[0], -1)


def _f16(b: np.ndarray) -> np.ndarray:
    """Little-endian fp16 bytes `[nb, 2]` -> float32 `[nb]`."""
    return np.ascontiguousarray(b).view(np.float16)[:, 0].astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """`[nb, 16]` -> `[nb, 32]`: elements 0..15 in the low nibbles, 16..31 in the high ones."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _bits(b: np.ndarray, shifts, mask: int) -> np.ndarray:
    """`[nb, g, L]` bytes -> `[nb, g, len(shifts), L]` fields `(b >> shift) & mask`."""
    return (b[:, :, None, :] >> np.asarray(shifts, np.uint8)[None, None, :, None]) & np.uint8(mask)


def _high_bit_5(qh32: np.ndarray) -> np.ndarray:
    """Q5_0 / Q5_1 `qh` (4 bytes, little-endian u32) -> the fifth bit of elements 0..31."""
    qh = np.ascontiguousarray(qh32).view("<u4")[:, 0]
    return ((qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)


def _k_scale_min(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K 12 bytes -> eight 6-bit scales and mins (gguf-py `Q4_K.get_scale_min`)."""
    d, m, m_d = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc, mn


# Each decoder: blocks uint8 [nb, type_size] -> (codes [nb, n_sub, sub], scales [nb, n_sub], offsets | None)
_Decoder = Callable[["np.ndarray"], tuple]


def _q4_0(b):
    return (_nibbles(b[:, 2:18]).astype(np.int16) - 8)[:, None], _f16(b[:, 0:2])[:, None], None


def _q4_1(b):
    return _nibbles(b[:, 4:20]).astype(np.int16)[:, None], _f16(b[:, 0:2])[:, None], _f16(b[:, 2:4])[:, None]


def _q5_0(b):
    q = _nibbles(b[:, 6:22]) | (_high_bit_5(b[:, 2:6]) << 4)
    return (q.astype(np.int16) - 16)[:, None], _f16(b[:, 0:2])[:, None], None


def _q5_1(b):
    q = _nibbles(b[:, 8:24]) | (_high_bit_5(b[:, 4:8]) << 4)
    return q.astype(np.int16)[:, None], _f16(b[:, 0:2])[:, None], _f16(b[:, 2:4])[:, None]


def _q8_0(b):
    return np.ascontiguousarray(b[:, 2:34]).view(np.int8).astype(np.int16)[:, None], _f16(b[:, 0:2])[:, None], None


def _q2_k(b):  # scales[16] qs[64] d dmin; element c*128 + s*32 + j = (qs[c*32 + j] >> 2s) & 3
    nb = b.shape[0]
    sc, d, dmin = b[:, 0:16], _f16(b[:, 80:82]), _f16(b[:, 82:84])
    q = _bits(b[:, 16:80].reshape(nb, 2, 32), (0, 2, 4, 6), 3).reshape(nb, 16, 16)
    return q.astype(np.int16), d[:, None] * (sc & 0x0F), -(dmin[:, None] * (sc >> 4))


def _q3_k(b):  # hmask[32] qs[64] scales[12] d; q = low 2 bits - 4 * (1 - hmask bit)
    nb = b.shape[0]
    s = b[:, 96:108]
    low = np.concatenate([s[:, 0:8] & 0x0F, s[:, 0:8] >> 4], axis=-1)
    high = _bits(s[:, None, 8:12], (0, 2, 4, 6), 3).reshape(nb, 16)
    sc = (low | (high << 4)).astype(np.int16) - 32
    ql = _bits(b[:, 32:96].reshape(nb, 2, 32), (0, 2, 4, 6), 3).reshape(nb, 16, 16)
    qh = _bits(b[:, None, 0:32], range(8), 1).reshape(nb, 16, 16)
    q = ql.astype(np.int16) - 4 * (1 - qh.astype(np.int16))
    return q, _f16(b[:, 108:110])[:, None] * sc, None


def _q4_k(b):  # d dmin scales[12] qs[128]; chunk c low nibbles = sub-block 2c, high = 2c+1
    nb = b.shape[0]
    sc, mn = _k_scale_min(b[:, 4:16])
    q = _bits(b[:, 16:144].reshape(nb, 4, 32), (0, 4), 0x0F).reshape(nb, 8, 32)
    return q.astype(np.int16), _f16(b[:, 0:2])[:, None] * sc, -(_f16(b[:, 2:4])[:, None] * mn)


def _q5_k(b):  # d dmin scales[12] qh[32] qs[128]; bit s of qh[j] = fifth bit of element s*32 + j
    nb = b.shape[0]
    sc, mn = _k_scale_min(b[:, 4:16])
    ql = _bits(b[:, 48:176].reshape(nb, 4, 32), (0, 4), 0x0F).reshape(nb, 8, 32)
    qh = _bits(b[:, None, 16:48], range(8), 1).reshape(nb, 8, 32)
    q = ql | (qh << 4)
    return q.astype(np.int16), _f16(b[:, 0:2])[:, None] * sc, -(_f16(b[:, 2:4])[:, None] * mn)


def _q6_k(b):  # ql[128] qh[64] int8 scales[16] d
    nb = b.shape[0]
    ql = _bits(b[:, 0:128].reshape(nb, 2, 64), (0, 4), 0x0F).reshape(nb, 8, 32)
    qh = _bits(b[:, 128:192].reshape(nb, 2, 32), (0, 2, 4, 6), 3).reshape(nb, 8, 32)
    q = (ql | (qh << 4)).astype(np.int16).reshape(nb, 16, 16) - 32
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8)
    return q, _f16(b[:, 208:210])[:, None] * sc, None


def _tq2_0(b):  # qs[64] d; element c*128 + s*32 + j = ((qs[c*32 + j] >> 2s) & 3) - 1
    nb = b.shape[0]
    q = _bits(b[:, 0:64].reshape(nb, 2, 32), (0, 2, 4, 6), 3).reshape(nb, 1, 256)
    return q.astype(np.int16) - 1, _f16(b[:, 64:66])[:, None], None


def _tq1_0(b):  # qs[48] qh[4] d: base-3 digits, digit = (byte * 3**i mod 256) * 3 >> 8
    nb = b.shape[0]

    def trits(x: np.ndarray, n: int) -> np.ndarray:  # [nb, L] -> [nb, n * L], digit-major
        p = x[:, None, :] * np.array([1, 3, 9, 27, 81][:n], np.uint8)[None, :, None]
        return ((p.astype(np.uint16) * 3) >> 8).reshape(nb, -1)

    q = np.concatenate([trits(b[:, 0:32], 5), trits(b[:, 32:48], 5), trits(b[:, 48:52], 4)], axis=-1)
    return q.astype(np.int16)[:, None] - 1, _f16(b[:, 52:54])[:, None], None


_IQ4_NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
_FP4_DOUBLED = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # e2m1 * 2


@cache
def _codebook(values: tuple[int, ...]) -> "np.ndarray":
    return np.array(values, np.int16)


def _iq4_nl(b):
    return _codebook(_IQ4_NL)[_nibbles(b[:, 2:18])][:, None], _f16(b[:, 0:2])[:, None], None


def _iq4_xs(b):  # d scales_h(u16) scales_l[4] qs[128]; sub-block j: 16 bytes, low nibbles then high
    nb = b.shape[0]
    low = np.stack([b[:, 4:8] & 0x0F, b[:, 4:8] >> 4], axis=-1).reshape(nb, 8)
    sh = np.ascontiguousarray(b[:, 2:4]).view("<u2")[:, 0]
    high = (sh[:, None] >> (2 * np.arange(8, dtype=np.uint16))) & 3
    sc = (low | (high << 4)).astype(np.int16) - 32
    q = _bits(b[:, 8:136].reshape(nb, 8, 16), (0, 4), 0x0F).reshape(nb, 8, 32)
    return _codebook(_IQ4_NL)[q], _f16(b[:, 0:2])[:, None] * sc, None


def _mxfp4(b):  # e8m0 exponent, qs[16]: value = 2**(e-128) * (2 * e2m1)
    e = b[:, 0].astype(np.uint32)
    d = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32).view(np.float32)
    return _codebook(_FP4_DOUBLED)[_nibbles(b[:, 1:17])][:, None], d[:, None], None


def _nvfp4(b):  # four ue4m3 scales (each * 0.5), then 4 x 8 bytes: low nibbles 0..7, high 8..15
    nb = b.shape[0]
    x = b[:, 0:4]
    exp = ((x >> 3) & 0x0F).astype(np.float32)
    man = (x & 0x07).astype(np.float32)
    raw = np.where(exp == 0, man * np.float32(2.0**-9), (1 + man / 8) * np.exp2(exp - 7)).astype(np.float32)
    d = np.where((x == 0) | (x == 0x7F), np.float32(0), raw * np.float32(0.5)).astype(np.float32)
    qs = b[:, 4:36].reshape(nb, 4, 8)
    return _codebook(_FP4_DOUBLED)[np.concatenate([qs & 0x0F, qs >> 4], axis=-1)], d, None


def _fmt(qtype, sub, lo, hi, offset=False, scale16=True, offset16=False):
    return BlockFormat(qtype, sub, lo, hi, offset, scale16, offset16)


FORMATS: dict[QT, tuple[BlockFormat, _Decoder]] = {
    QT.Q4_0: (_fmt(QT.Q4_0, 32, -8, 7), _q4_0),
    QT.Q4_1: (_fmt(QT.Q4_1, 32, 0, 15, offset=True, offset16=True), _q4_1),
    QT.Q5_0: (_fmt(QT.Q5_0, 32, -16, 15), _q5_0),
    QT.Q5_1: (_fmt(QT.Q5_1, 32, 0, 31, offset=True, offset16=True), _q5_1),
    QT.Q8_0: (_fmt(QT.Q8_0, 32, -128, 127), _q8_0),
    QT.Q2_K: (_fmt(QT.Q2_K, 16, 0, 3, offset=True, scale16=False), _q2_k),
    QT.Q3_K: (_fmt(QT.Q3_K, 16, -4, 3, scale16=False), _q3_k),
    QT.Q4_K: (_fmt(QT.Q4_K, 32, 0, 15, offset=True, scale16=False), _q4_k),
    QT.Q5_K: (_fmt(QT.Q5_K, 32, 0, 31, offset=True, scale16=False), _q5_k),
    QT.Q6_K: (_fmt(QT.Q6_K, 16, -32, 31, scale16=False), _q6_k),
    QT.TQ1_0: (_fmt(QT.TQ1_0, 256, -1, 1), _tq1_0),
    QT.TQ2_0: (_fmt(QT.TQ2_0, 256, -1, 2), _tq2_0),  # llama.cpp writes -1..1; the 2-bit field allows 2
    QT.IQ4_NL: (_fmt(QT.IQ4_NL, 32, -127, 113), _iq4_nl),
    QT.IQ4_XS: (_fmt(QT.IQ4_XS, 32, -127, 113, scale16=False), _iq4_xs),
}
for _name, _sub, _dec in (("MXFP4", 32, _mxfp4), ("NVFP4", 16, _nvfp4)):  # newer gguf-py only
    if hasattr(QT, _name):
        FORMATS[QT[_name]] = (_fmt(QT[_name], _sub, -12, 12, scale16=False), _dec)


def block_format(qtype: QT) -> BlockFormat | None:
    entry = FORMATS.get(qtype)
    return entry[0] if entry else None


def decode(raw: np.ndarray, qtype: QT, n: int, k: int) -> Decoded:
    """`raw`: GGUFReader's uint8 view `[N, K/block * type_size]` of an `[N, K]` weight."""
    fmt, decoder = FORMATS[qtype]
    block, type_size = GGML_QUANT_SIZES[qtype]
    if k % block:
        raise ValueError(f"{qtype.name}: row length {k} is not a multiple of the block size {block}")
    blocks = np.asarray(raw, dtype=np.uint8).reshape(n * (k // block), type_size)
    codes, scales, offsets = decoder(blocks)
    n_sub = k // fmt.sub_block
    codes = np.asarray(codes, np.int16).reshape(n, n_sub, fmt.sub_block)
    scales = np.asarray(scales, np.float32).reshape(n, n_sub)
    if offsets is not None:
        offsets = np.asarray(offsets, np.float32).reshape(n, n_sub)
    return Decoded(codes, scales, offsets)
