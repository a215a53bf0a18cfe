"""GGUF block-quantized weights -> onnxruntime's block-quantized ops, exactly.

Every type in `blocks.FORMATS` dequantizes (gguf-py) as `w = scale*code + offset`
with an integer code in a small range and `scale*code` exact in float32. That maps
onto `w = (q - zp) * scale (+ offset)` of MatMulNBits / GatherBlockQuantized with
the source's own sub-block as `block_size`, `scale` the sub-block scale in float32,
and `q` the code shifted into the narrowest width the CPU kernels take:

| type | bits / block_size | stored code q | MatMulNBits zero point | offset term |
|---|---|---|---|---|
| Q4_0 | 4 / 32 | code + 8 | op default (8) | - |
| Q3_K | 4 / 16 | code + 8 | op default | - |
| Q8_0, Q5_0, IQ4_NL, IQ4_XS, MXFP4 | 8 / 32 | code + 128 | op default (128) | - |
| Q6_K, NVFP4 | 8 / 16 | code + 128 | op default | - |
| TQ1_0 | 2 / 256 | code + 2 | op default (2) | - |
| TQ2_0 | 2 / 256 | code + 1 | uint8 1 (the field can hold 2) | - |
| Q4_1, Q4_K | 4 / 32 | code | float z, fl(z*scale) == -offset | - |
| Q2_K | 2 / 16 | code | float z, as above | - |
| Q5_1, Q5_K | 8 / 32 | code - c + 128 | op default | + offset + c*scale per block |

(K-quant scale = d*sc_j, offset = -dmin*m_j; Q4_1 / Q5_1 scale d, offset m; IQ4 / FP4
codes are the codebook values, 2*e2m1 for MXFP4 / NVFP4 with the scale halved.) A zero
scale with a float zero point (Q4_K `sc == 0`, Q4_1 `d == 0`) is the constant `offset`:
codes 0, scale `-offset`, zero point 1.

GatherBlockQuantized takes integer zero points only (same type as `data`), so for the
embedding Q4_1 / Q4_K / Q2_K store codes with uint8 zero point 0 plus the offset term.

Verified onnxruntime 1.32 CPU capabilities (x86-64, fp32 and fp16 `A`/`scales`):
MatMulNBits runs bits 2, 4, 8 (3, 5, 6 refused at session creation), `block_size`
16..256, zero points absent / uint8 packed at every width, float zero points at 2 and 4
bits only (8 bits: "does not support 8-bit weights with floating-point zero points").
Its weight is `fl((q - zp) * scale)` for integer zero points and
`fl(fl(q*scale) - fl(zp*scale))` for float ones; fp16 graphs compute in float32 and round
the output. GatherBlockQuantized runs uint8 data at bits 2, 4, 8 and int4/uint4 data,
`block_size` 16..256, zero points of the data type only (a float one is a type error);
its output is `fl((q - zp) * scale)` in the scale dtype.

Re-centred codes (Q5_1, Q5_K for MatMulNBits): a sub-block's codes 0..31 are all of one sign,
while the weights they make (`scale*code + offset`) sit around zero. MatMulNBits' fast CPU path
(accuracy_level 4, the CPU default) rounds the activations to int8 and multiplies them by
`q - zp`, so its rounding error grows with `|q - zp|`: stored as `code + 128` it is the
uncentred `scale*code`, up to 31 steps, where llama.cpp's own dot product (activations in
Q8_K) weighs it by the weight itself. So each sub-block stores `code - c + 128` with `c`, its
natural zero point, the integer nearest `-offset / scale` (clipped so the code fits a byte),
and the offset term carries `offset + c*scale` instead. The weights are the same numbers:
`(code - c)*scale` is exact in float32 (`|code - c| <= 128`: at most 7 significant bits beside
the scale's 17), and `c` is kept only where `offset + c*scale` is too (else 0, the plain form),
so `(code - c)*scale + (offset + c*scale)` rounds as gguf-py's `scale*code + offset` does
(bench/kquant_numerics.py measures the effect: the level-4 error of a Q5_K_M model against its
float run halves).

Offset term (Q5_1, Q5_K; embeddings of Q4_1 / Q4_K / Q2_K): with `O = block_offsets`
`[N, k_blocks]`, MatMulNBits: `Y = MatMulNBits(A) + MatMul(ReduceSum(Reshape(A, [..,
k_blocks, block_size]), axes=-1), O^T)`; GatherBlockQuantized: `E = Reshape(GBQ(ids),
[.., k_blocks, block_size]) + Unsqueeze(Gather(O, ids), -1)`, reshaped back. It costs
1/block_size of the matmul.

Types without an exact mapping here: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M
(grid codebooks of small integers: an 8-bit form should be exact but costs 2.5-5.5x the
source's bits; not built), Q8_1, Q8_K, Q1_0 (gguf-py cannot dequantize them). They are
dequantized (and re-quantized if the plan says so). Note that the 8-bit forms of IQ4_NL,
IQ4_XS, MXFP4, NVFP4, Q5_* also store more bits than the source (`CarryOver.bits_per_weight`
vs `source_bits_per_weight`): the plan may prefer a lossy 4-bit re-quantization.
`error_bound` gives the per-element bound of the exact forms.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...util.lazy_import import lazy_module
from ...weights import QuantizedRows, QuantizedTensor, pack_codes as pack
from .blocks import FORMATS, BlockFormat, block_format, decode
from .constants import GGMLQuantizationType as QT

# Imported when a tensor is converted: describing a GGUF (the metadata verbs) needs only `carry_over`.
np = lazy_module("numpy")

MATMUL = "MatMulNBits"
GATHER = "GatherBlockQuantized"
KERNEL_BITS = (2, 4, 8)  # what onnxruntime's CPU kernels take



@dataclass(frozen=True)
class CarryOver:
    """How a GGUF type is carried into `op` exactly, known from the type alone."""

    qtype: QT
    op: str  # MATMUL or GATHER
    bits: int
    block_size: int
    zero_points: str  # "default" (none stored), "uint8" (packed), "float" ([N, k_blocks], scale dtype)
    block_offsets: bool  # the graph adds a per-block offset term
    code_shift: int  # stored code = GGUF code + code_shift (- the sub-block's zero point when `centred`)
    source_bits_per_weight: float
    # Each sub-block's codes shifted by its natural zero point, the offset term taking up the rest
    # (MatMulNBits forms with an offset term: see "Re-centred codes" above).
    centred: bool = False

    @property
    def has_zero_points(self) -> bool:
        return self.zero_points != "default"

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per weight with float16 scales (and zero points / offsets)."""
        per_block = 16 + (16 if self.zero_points == "float" else self.bits if self.zero_points == "uint8" else 0)
        return self.bits + (per_block + (16 if self.block_offsets else 0)) / self.block_size


def _plan(fmt: BlockFormat, op: str) -> CarryOver:
    bits = next(b for b in KERNEL_BITS if fmt.code_max - fmt.code_min < 2**b)
    half = 2 ** (bits - 1)
    if -half <= fmt.code_min and fmt.code_max < half:
        zero_points, shift = "default", half
    elif fmt.has_offset and op == MATMUL and bits < 8:
        zero_points, shift = "float", -fmt.code_min
    else:
        zero_points, shift = "uint8", -fmt.code_min
    offsets = fmt.has_offset and zero_points != "float"
    centred = offsets and op == MATMUL and zero_points == "default"
    return CarryOver(fmt.qtype, op, bits, fmt.sub_block, zero_points, offsets, shift, fmt.source_bits_per_weight,
                     centred)


ENCODINGS: dict[tuple[QT, str], CarryOver] = {
    (qtype, op): _plan(fmt, op) for qtype, (fmt, _) in FORMATS.items() for op in (MATMUL, GATHER)
}


def carry_over(qtype: QT, op: str = MATMUL) -> CarryOver | None:
    """The exact form of `qtype` for `op`, or None when there is none (dequantize instead)."""
    if op not in (MATMUL, GATHER):
        raise ValueError(f"unknown op {op!r}")
    return ENCODINGS.get((qtype, op))


def to_quantized_tensor(raw: np.ndarray, qtype: QT, n: int, k: int, op: str = MATMUL) -> QuantizedTensor:
    """`raw` is GGUFReader's uint8 view `[N, K/block * type_size]` of an `[N, K]` weight."""
    return quantized_rows(raw, qtype, n, k, op).whole()


def quantized_rows(raw: np.ndarray, qtype: QT, n: int, k: int, op: str = MATMUL) -> QuantizedRows:
    """`to_quantized_tensor`, converted only a chunk of rows at a time, when asked for them.

    Decoding widens each code to int16 and each sub-block parameter to float32, so a whole LM
    head decoded at once held 1.3-1.9x its float32 size (bench/quant_bench.py); each row is
    converted on its own, so any chunking gives the same bytes."""
    form = carry_over(qtype, op)
    if form is None:
        raise ValueError(f"GGUF {qtype.name} has no exact {op} form; dequantize it")
    raw = np.asarray(raw).reshape(n, -1)
    return QuantizedRows(form.bits, form.block_size, (n, k),
                         lambda start, stop: _convert(raw[start:stop], qtype, stop - start, k, form), qtype.name)


def _convert(raw: np.ndarray, qtype: QT, n: int, k: int, form: CarryOver) -> QuantizedTensor:
    fast = _BYTEWISE.get(qtype)
    if fast is not None and form.zero_points == "default" and not form.block_offsets:
        return fast(raw, n, k, form)
    dec = decode(raw, qtype, n, k)
    codes = dec.codes + np.int16(form.code_shift)
    scales = dec.scales.copy()
    # A sub-block of zero codes is `offset` whatever its scale: store scale 0 (an all-zero MXFP4
    # block carries the scale 2**-128, which would keep a float16 graph from holding the tensor).
    scales[np.all(dec.codes == 0, axis=-1)] = 0
    zero_points = None
    if form.zero_points == "float":
        zero_points = _float_zero_points(codes, scales, -dec.offsets)
    elif form.zero_points == "uint8":
        zero_points = pack(np.full(scales.shape, form.code_shift, np.uint8), form.bits)
    offsets = dec.offsets if form.block_offsets else None
    if form.centred:
        shift, offsets = _natural_zero_points(scales, offsets, form)
        codes -= shift[..., None]
    data = pack(codes.astype(np.uint8), form.bits)
    return QuantizedTensor(form.bits, form.block_size, (n, k), data, scales, zero_points, qtype.name, offsets)


def _natural_zero_points(scales: np.ndarray, offsets: np.ndarray, form: CarryOver) -> tuple[np.ndarray, np.ndarray]:
    """Per sub-block `c`, the integer nearest `-offset / scale` (so `(code - c)*scale` is about the
    weight itself), and the offsets `offset + c*scale` that keep every weight the same number.

    `c` is clipped so every stored code `code - c + code_shift` fits the form's bits, and is 0 where
    the scale is 0 or not finite, or where `offset + c*scale` is not exactly a float32 (its two
    terms far apart in magnitude): then the sub-block keeps the plain form, exactly as before.
    """
    fmt = block_format(form.qtype)
    half = 2 ** (form.bits - 1)
    s, o = scales.astype(np.float64), offsets.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c = np.where((s != 0) & np.isfinite(s) & np.isfinite(o), np.rint(-o / np.where(s != 0, s, 1)), 0)
        c = np.clip(np.nan_to_num(c), fmt.code_max - (half - 1), fmt.code_min + half)
        product = c * s  # exact: c has at most 8 bits, s 24
        total = o + product
        # TwoSum: the float64 sum's rounding error, 0 exactly when the sum is exact.
        back = total - o
        error = (o - (total - back)) + (product - back)
        exact = (error == 0) & np.isfinite(total) & (total.astype(np.float32).astype(np.float64) == total)
    c = np.where(exact, c, 0)
    return c.astype(np.int16), (o + c * s).astype(np.float32)


def _block_scales(blocks: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """The fp16 `d` of each block `[n, nb, size]` as float32, 0 where every code is 0 (as `_convert`)."""
    scales = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16)[..., 0].astype(np.float32)
    scales[zero] = 0
    return scales


def _q4_0_bytes(raw: np.ndarray, n: int, k: int, form: CarryOver) -> QuantizedTensor:
    """Q4_0 by byte operations, the bytes `_convert`'s general path gives (tests/sources hold them equal).

    A block stores element j < 16 in the low nibble of byte j and element 16 + j in its high
    nibble, already as the code + 8 MatMulNBits keeps; MatMulNBits wants elements 2i and 2i+1 in
    the low and high nibbles of byte i. So byte i < 8 is (even byte's low, odd byte's low) and
    byte 8 + i the two high nibbles, of the pair of bytes 2i, 2i+1: read as one little-endian
    uint16 `p = even | odd << 8`, those are `p & 0x0F | p >> 4 & 0xF0` and `p >> 4 & 0x0F | p >> 8 & 0xF0`."""
    blocks = np.asarray(raw, np.uint8).reshape(n, k // 32, 18)
    pairs = np.ascontiguousarray(blocks[..., 2:]).view("<u2")  # [n, nb, 8]
    data = np.empty((n, k // 32, 16), np.uint8)
    shifted = pairs >> 4
    data[..., :8] = (pairs & 0x0F) | (shifted & 0xF0)
    data[..., 8:] = (shifted & 0x0F) | ((pairs >> 8) & 0xF0)
    zero = _all_bytes(data, 0x88)  # every code 8 - 8 = 0
    return QuantizedTensor(form.bits, form.block_size, (n, k), data, _block_scales(blocks, zero), None, "Q4_0")


def _q8_0_bytes(raw: np.ndarray, n: int, k: int, form: CarryOver) -> QuantizedTensor:
    """Q8_0 by byte operations: the stored code is the int8 code + 128, its byte with the top bit flipped."""
    blocks = np.asarray(raw, np.uint8).reshape(n, k // 32, 34)
    data = blocks[..., 2:] ^ np.uint8(0x80)
    zero = _all_bytes(data, 0x80)
    return QuantizedTensor(form.bits, form.block_size, (n, k), data, _block_scales(blocks, zero), None, "Q8_0")


def _all_bytes(data: np.ndarray, byte: int) -> np.ndarray:
    """Which blocks of `data` `[n, nb, L]` (contiguous, L a multiple of 8) hold only `byte`, compared 8 bytes at a time."""
    words = data.view(np.uint64)  # [n, nb, L / 8]
    pattern = np.uint64(int.from_bytes(bytes([byte]) * 8, "little"))
    same = words[..., 0] == pattern
    for i in range(1, words.shape[-1]):
        same &= words[..., i] == pattern
    return same


# Types whose carry-over is a rearrangement of their bytes (checked against the general path).
_BYTEWISE = {QT.Q4_0: _q4_0_bytes, QT.Q8_0: _q8_0_bytes}


def _float_zero_points(codes: np.ndarray, scales: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Float zero points `z` with `fl(z * scale) == target` where float32 allows (else the nearest).

    The CPU kernel's weight is `fl(q*s) - fl(z*s)`, so that makes it `fl(q*s - target)`,
    gguf-py's own rounding. A zero scale (`sc == 0` sub-block, `d == 0`) cannot carry the
    constant `-target`: codes 0, scale `target`, zero point 1 give `0 - target` exactly.
    Mutates `codes` and `scales` for those sub-blocks.
    """
    dead = scales == 0
    codes[dead] = 0
    scales[dead] = target[dead]
    live = ~dead
    z = np.ones_like(scales)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z0 = np.where(live, target / np.where(live, scales, 1), 0).astype(np.float32)
        best = z0.copy()
        for cand in (np.nextafter(z0, np.float32(-np.inf)), np.nextafter(z0, np.float32(np.inf)), z0):
            best = np.where(cand * scales == target, cand, best)
    z[live] = best[live]
    return z.astype(np.float32)


U32 = 2.0**-24  # unit roundoff of float32
U16 = 2.0**-11  # of float16


def _gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


def error_bound(form: CarryOver, scale_dtype) -> tuple[float, float]:
    """`(rel, abs)`: per element, |W_graph - W_gguf-py| <= rel * T + abs, with
    T = |scale*code| + |offset| (the magnitudes in gguf-py's formula) and W_graph the
    weight the graph applies (MatMulNBits on a one-hot row, GatherBlockQuantized's row;
    with the offset term). Every rounding of a quantity of magnitude <= T costs u*T.

    float32 scales: integer zero points: 0 (`(q - zp)*scale` is gguf-py's exact product,
    `+ offset` the same single rounding as gguf-py's). Float zero points: `fl(z*scale)` is
    within 2u|offset| of `-offset` (z is chosen so it is usually exact), then at most two
    kernel roundings and gguf-py's own: gamma_5(u32).
    float16 scales (valid when `fits_float16` holds: scales and float zero points zero or
    normal): one rounding each for the output, a scale that is not the fp16 `d` itself, a
    float zero point, and with an offset term the offset (unless it is the fp16 `m`) and the
    Add; float32 terms as above; abs covers outputs that land in float16's subnormal range,
    and an offset rounded there. Re-centred codes (`centred`): `|(code - c)*scale| <= 2T` and
    `|offset + c*scale| <= |offset|` (c is 0, or the nearest integer to -offset/scale, so then
    `|scale|/2 <= |offset|`; clipping only shrinks both), so the MatMulNBits output and the
    scale's rounding count twice, the offset (never the fp16 `m` now) once.

    Measured (tests/sources/test_gguf_quant_ort.py fixtures, onnxruntime 1.32 x86-64):
    float32: 0 for every integer-zero-point and offset form; float zero points (Q4_1, Q4_K,
    Q2_K) at most 3.1 u32 * T, 97-99 % of weights bit-exact. float16: at most 1.0 / 1.8 u16 * T
    for bounds of 1 / 2 u16 (Q4_0 / Q6_K); re-centred Q5_K / Q5_1 at most 2.6 / 2.0 u16 * T for 6 / 4.
    """
    fmt = block_format(form.qtype)
    floatzp = form.zero_points == "float"
    if np.dtype(scale_dtype) == np.float32:
        return (_gamma(5, U32) if floatzp else 0.0), 0.0
    if np.dtype(scale_dtype) != np.float16:
        raise ValueError(f"no bound for scale dtype {scale_dtype}")
    weight = 2 if form.centred else 1  # the MatMulNBits product's magnitude, in T
    n16 = weight * (1 + (not fmt.scale_is_fp16)) + floatzp
    rounded_offsets = form.block_offsets and (form.centred or not fmt.offset_is_fp16)
    if form.block_offsets:
        n16 += 1 + rounded_offsets
    n32 = 5 if floatzp else (1 if fmt.has_offset else 0)
    outputs = 2 if form.block_offsets else 1
    return _gamma(n16, U16) + _gamma(n32, U32), (outputs + rounded_offsets) * 2.0**-25


def fits_float16(qt: QuantizedTensor) -> bool:
    """Whether a float16 graph can hold `qt` within `error_bound`: every scale and float zero
    point is zero or a normal float16, every offset at most float16's largest (one in the
    subnormal range rounds within 2**-25, which the bound's abs counts), and no dequantized
    weight overflows float16."""
    params = [qt.scales]
    if qt.zero_points is not None and qt.zero_points.dtype.kind == "f":
        params.append(qt.zero_points)
    fp16 = np.finfo(np.float16)
    for p in params:
        a = np.abs(p.astype(np.float64))
        if not np.all((a == 0) | ((a >= fp16.tiny) & (a <= fp16.max))):
            return False
    if qt.block_offsets is not None and not np.all(np.abs(qt.block_offsets.astype(np.float64)) <= fp16.max):
        return False
    return bool(np.abs(qt.dequantize()).max(initial=0) <= fp16.max)
