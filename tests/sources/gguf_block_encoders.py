"""Test-side GGUF block encoders: random codes and parameters -> raw block bytes.

Written from the layouts (llama.cpp `ggml-common.h` / `ggml-quants.c`, as gguf-py 0.19.0
decodes them), independently of `mtpc.sources.gguf.blocks`. gguf-py's `quantize` has no
K-quants, so fixtures are synthesised; the oracle is always `gguf.quants.dequantize`.

`encode(qtype, rng, n_blocks, moderate)` returns the bytes `[n_blocks, type_size]` and the
magnitude of gguf-py's terms per element, `T = |scale*code| + |offset|` (float64), which
the error bounds scale with. Blocks cycle through edge cases: all bytes zero, zero `d` /
`dmin` with random codes, zero sub-scales / mins, negative mins and scales, and (unless
`moderate`) extreme fp16 scales: +-65504, the smallest normal 2**-14, subnormals. A
moderate encoder keeps every fp16-cast parameter zero or normal, for float16 graphs.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

CASES = ("random", "zero_bytes", "zero_d", "zero_subscales", "negative", "max", "min_normal", "subnormal")
MODERATE_CASES = ("random", "zero_bytes", "zero_d", "zero_subscales", "negative")
IQ4_NL_VALUES = np.array((-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113))
FP4_DOUBLED = np.array((0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12))


def _fp16(x) -> np.ndarray:
    return np.asarray(x, np.float16).reshape(-1).view(np.uint8)


def _magnitude(rng, case: str, moderate: bool) -> float:
    """A positive fp16 magnitude for `d`/`dmin` under `case`."""
    if case == "max":
        return 65504.0
    if case == "min_normal":
        return 2.0**-14
    if case == "subnormal":
        return float(rng.integers(1, 1024)) * 2.0**-24
    if moderate:
        return float(np.float16(2.0 ** rng.uniform(-6, 0)))
    return float(np.float16(2.0 ** rng.uniform(-12, 8)))


def _block_params(rng, case: str, moderate: bool):
    """(d, dmin) fp16 values for one block."""
    d, dmin = _magnitude(rng, case, moderate), _magnitude(rng, case, moderate)
    if case == "zero_d":  # the sub-blocks are constants: -dmin*m (K-quants), m (Q4_1 / Q5_1)
        d = 0.0
    if case == "negative":
        d, dmin = -d, -dmin
    else:
        d, dmin = d * rng.choice([1, -1], p=[0.8, 0.2]), dmin * rng.choice([1, -1])
    return float(np.float16(d)), float(np.float16(dmin))


def _nib32(q: np.ndarray) -> np.ndarray:
    """32 4-bit values -> 16 bytes: element j low nibble, element j+16 high nibble of byte j."""
    return (q[:16] & 15 | (q[16:32] & 15) << 4).astype(np.uint8)


def _crumbs(q: np.ndarray, n_chunks: int) -> np.ndarray:
    """2-bit values, element c*128 + s*32 + j in bits 2s of byte c*32 + j."""
    q = q.reshape(n_chunks, 4, 32)
    return (q[:, 0] | q[:, 1] << 2 | q[:, 2] << 4 | q[:, 3] << 6).astype(np.uint8).reshape(-1)


def _bitplane(bits: np.ndarray) -> np.ndarray:
    """256 bits, element s*32 + j in bit s of byte j."""
    b = bits.reshape(8, 32).astype(np.uint8)
    return np.bitwise_or.reduce(b << np.arange(8, dtype=np.uint8)[:, None], axis=0).astype(np.uint8)


def _k_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins -> the 12-byte Q4_K / Q5_K field."""
    s = np.zeros(12, np.uint8)
    s[0:4] = sc[0:4] | (sc[4:8] >> 4) << 6
    s[4:8] = m[0:4] | (m[4:8] >> 4) << 6
    s[8:12] = (sc[4:8] & 15) | (m[4:8] & 15) << 4
    return s


def _sub_scales(rng, case: str, n: int, hi: int) -> np.ndarray:
    s = rng.integers(0, hi + 1, n)
    if case == "zero_subscales":
        s[rng.random(n) < 0.5] = 0
    return s


def _encode_block(qtype: QT, rng, case: str, moderate: bool):
    """One block -> (bytes, per-element |scale*code|, per-element |offset|)."""
    d, dmin = _block_params(rng, case, moderate)
    if qtype in (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0):
        bits = {QT.Q4_0: 4, QT.Q4_1: 4, QT.Q5_0: 5, QT.Q5_1: 5, QT.Q8_0: 8}[qtype]
        q = rng.integers(0, 2**bits, 32)
        signed = qtype in (QT.Q4_0, QT.Q5_0, QT.Q8_0)
        code = q - (2 ** (bits - 1) if signed else 0)
        head = _fp16(d) if signed else np.concatenate([_fp16(d), _fp16(dmin)])
        if bits == 8:
            body = code.astype(np.int8).view(np.uint8)
        else:
            body = _nib32(q)
            if bits == 5:
                qh = np.uint32(np.sum((q >> 4).astype(np.uint64) << np.arange(32, dtype=np.uint64)))
                body = np.concatenate([np.array([qh], "<u4").view(np.uint8), body])
        offset = 0.0 if signed else dmin
        return np.concatenate([head, body]), np.abs(d * code), np.full(32, abs(offset))
    if qtype == QT.Q2_K:
        sc, m = _sub_scales(rng, case, 16, 15), _sub_scales(rng, case, 16, 15)
        q = rng.integers(0, 4, 256)
        raw = np.concatenate([(sc | m << 4).astype(np.uint8), _crumbs(q, 2), _fp16(d), _fp16(dmin)])
        return raw, np.abs(np.repeat(d * sc, 16) * q), np.repeat(np.abs(dmin * m), 16)
    if qtype == QT.Q3_K:
        sc = _sub_scales(rng, case, 16, 63)  # stored sc, value sc - 32
        if case == "zero_subscales":
            sc[rng.random(16) < 0.5] = 32
        code = rng.integers(-4, 4, 256)
        high = (code >= 0).astype(np.uint8)  # the bit set means "no -4"
        low = code + 4 * (1 - high)
        scales = np.zeros(12, np.uint8)
        scales[0:8] = (sc[0:8] & 15) | (sc[8:16] & 15) << 4
        for i in range(16):
            scales[8 + i % 4] |= ((sc[i] >> 4) & 3) << (2 * (i // 4))
        raw = np.concatenate([_bitplane(high), _crumbs(low, 2), scales, _fp16(d)])
        return raw, np.abs(np.repeat(d * (sc - 32), 16) * code), np.zeros(256)
    if qtype in (QT.Q4_K, QT.Q5_K):
        sc, m = _sub_scales(rng, case, 8, 63), _sub_scales(rng, case, 8, 63)
        q = rng.integers(0, 16 if qtype == QT.Q4_K else 32, 256)
        q8 = q.reshape(8, 32)
        qs = ((q8[0::2] & 15) | (q8[1::2] & 15) << 4).astype(np.uint8).reshape(-1)
        parts = [_fp16(d), _fp16(dmin), _k_scales(sc, m)]
        if qtype == QT.Q5_K:
            parts.append(_bitplane(q >> 4))
        raw = np.concatenate(parts + [qs])
        return raw, np.abs(np.repeat(d * sc, 32) * q), np.repeat(np.abs(dmin * m), 32)
    if qtype == QT.Q6_K:
        sc = rng.integers(-128, 128, 16)
        if case == "zero_subscales":
            sc[rng.random(16) < 0.5] = 0
        q = rng.integers(0, 64, 256).reshape(2, 128)  # two halves of 128
        ql = np.zeros((2, 64), np.uint8)
        qh = np.zeros((2, 32), np.uint8)
        for h in range(2):
            ql[h] = (q[h, 0:64] & 15) | (q[h, 64:128] & 15) << 4
            for s in range(4):
                qh[h] |= ((q[h, s * 32:(s + 1) * 32] >> 4) & 3).astype(np.uint8) << (2 * s)
        raw = np.concatenate([ql.reshape(-1), qh.reshape(-1), sc.astype(np.int8).view(np.uint8), _fp16(d)])
        return raw, np.abs(np.repeat(d * sc, 16) * (q.reshape(-1) - 32)), np.zeros(256)
    if qtype == QT.TQ2_0:
        q = rng.integers(0, 3, 256)
        return np.concatenate([_crumbs(q, 2), _fp16(d)]), np.abs(d * (q - 1)), np.zeros(256)
    if qtype == QT.TQ1_0:
        t = rng.integers(0, 3, 256)  # trit + 1; element order: 5 digits x 32, 5 x 16, 4 x 4

        def pack_trits(x: np.ndarray, n_digits: int) -> np.ndarray:  # x [n_digits, L] -> [L]
            v = np.sum(x * (3 ** np.arange(4, 4 - n_digits, -1))[:, None], axis=0)  # digit i weighs 3**(4-i)
            return ((v * 256 + 242) // 243).astype(np.uint8)

        qs = np.concatenate([pack_trits(t[:160].reshape(5, 32), 5), pack_trits(t[160:240].reshape(5, 16), 5)])
        qh = pack_trits(t[240:256].reshape(4, 4), 4)
        return np.concatenate([qs, qh, _fp16(d)]), np.abs(d * (t - 1)), np.zeros(256)
    if qtype == QT.IQ4_NL:
        idx = rng.integers(0, 16, 32)
        return np.concatenate([_fp16(d), _nib32(idx)]), np.abs(d * IQ4_NL_VALUES[idx]), np.zeros(32)
    if qtype == QT.IQ4_XS:
        sc = _sub_scales(rng, case, 8, 63)
        idx = rng.integers(0, 16, 256).reshape(8, 32)
        scales_h = np.array([np.sum(((sc >> 4) & 3).astype(np.uint32) << (2 * np.arange(8, dtype=np.uint32)))], "<u2")
        scales_l = ((sc[0::2] & 15) | (sc[1::2] & 15) << 4).astype(np.uint8)
        qs = np.concatenate([_nib32(idx[j]) for j in range(8)])
        raw = np.concatenate([_fp16(d), scales_h.view(np.uint8), scales_l, qs])
        return raw, np.abs(np.repeat(d * (sc - 32), 32) * IQ4_NL_VALUES[idx.reshape(-1)]), np.zeros(256)
    if qtype.name == "MXFP4":
        e = {"min_normal": 1, "subnormal": 0, "max": 160, "zero_d": 0}.get(case) if not moderate else None
        e = int(rng.integers(115, 128)) if e is None else e  # 2**-13 .. 2**-1: normal in float16
        idx = rng.integers(0, 16, 32)
        scale = 2.0 ** (e - 128) if e >= 1 else 2.0**-128  # e8m0, halved: e = 0 and 1 are float32 subnormals
        return np.concatenate([[np.uint8(e)], _nib32(idx)]), np.abs(scale * FP4_DOUBLED[idx]), np.zeros(32)
    if qtype.name == "NVFP4":
        codes = rng.integers(0x30, 0x40, 4) if moderate else rng.integers(0, 0x80, 4)  # 0x7F decodes as 0
        if case == "zero_bytes":
            codes[:] = 0
        idx = rng.integers(0, 16, 64).reshape(4, 16)
        exp, man = codes >> 3, codes & 7
        scale = np.where(exp == 0, man * 2.0**-9, (1 + man / 8) * 2.0 ** (exp - 7)) * 0.5
        scale = np.where((codes == 0) | (codes == 0x7F), 0.0, scale)
        qs = np.concatenate([(idx[s, :8] | idx[s, 8:] << 4).astype(np.uint8) for s in range(4)])
        raw = np.concatenate([codes.astype(np.uint8), qs])
        return raw, np.abs(np.repeat(scale, 16) * FP4_DOUBLED[idx.reshape(-1)]), np.zeros(64)
    raise NotImplementedError(qtype.name)


def encode(qtype: QT, rng, n_blocks: int, moderate: bool = False):
    """`n_blocks` blocks -> (raw uint8 [n_blocks, type_size], T float64 [n_blocks, block])."""
    cases = MODERATE_CASES if moderate else CASES
    block, size = GGML_QUANT_SIZES[qtype]
    raw = np.zeros((n_blocks, size), np.uint8)
    terms = np.zeros((n_blocks, block))
    for i in range(n_blocks):
        case = cases[i % len(cases)]
        if case == "zero_bytes":
            continue
        b, prod, off = _encode_block(qtype, rng, case, moderate)
        assert b.shape == (size,), (qtype.name, b.shape)
        raw[i], terms[i] = b, prod + off
    return raw, terms
