"""Weight quantization for MatMulNBits, and the per-tensor decision of what to store.

Float weights are quantized round-to-nearest per block along K into onnxruntime's
MatMulNBits layout: symmetric with the op's default zero point (`2**(bits-1)`), or
asymmetric with uint8 zero points. Weights the source already stores block-quantized
(GGUF) arrive as `QuantizedTensor`s and are carried over untouched when the plan keeps
the source or asks for the same bits and block size.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ..ir import QuantForm, QuantizationPlan, QuantScheme, WeightDecision
from ..util.lazy_import import lazy_module
from .store import QuantizedRows, QuantizedTensor, TensorInfo, Weight, pack_codes

# Imported when a weight is converted: the quantization pass and the notes read only the plan.
np = lazy_module("numpy")


# Rows quantized at a time: their float32 temporaries stay near 1 MB each whatever the tensor's size,
# so quantizing a weight holds little more than the weight and its (smaller) packed result.
_CHUNK_ELEMENTS = 1 << 18


def quantize_linear(w, bits: int, block_size: int, *, symmetric: bool = True,
                    float_zero_points: bool = False) -> QuantizedTensor:
    """Quantize an `[N, K]` float weight (nn.Linear layout) for MatMulNBits, round to nearest per block.

    Symmetric: scale `absmax / (2**(bits-1) - 1)` and the op's default zero point. Asymmetric:
    the block's range `[min(lo, 0), max(hi, 0)]` over `2**bits - 1` steps with a uint8 zero point
    (zero stays exactly representable), for weights whose blocks are not centred on zero.

    `float_zero_points` (asymmetric, 4 bits): each block's minimum in float32 instead of an integer zero point,
    scale and minimum fitted as llama.cpp fits Q4_K's (`_kquant_rows`).

    `w` may be anything whose row slices `w[a:b]` are float arrays (`arrays.Bfloat16Rows`,
    `weights.QuantizedRows`): it is read a chunk of rows at a time and never made whole.
    """
    _check_bits(bits)
    n, k = w.shape
    k_blocks = -(-k // block_size)
    data = np.empty((n, k_blocks, block_size * bits // 8), np.uint8)
    scales = np.empty((n, k_blocks), np.float32)
    if symmetric:
        zero_points = None
    elif float_zero_points:
        zero_points = np.empty((n, k_blocks), np.float32)
    else:
        zero_points = np.empty((n, -(-k_blocks * bits // 8)), np.uint8)
    rows = _chunk_rows(k_blocks * block_size)
    for start in range(0, n, rows):
        q = _quantize_rows(w[start : start + rows], bits, block_size, symmetric, float_zero_points)
        here = slice(start, start + q.shape[0])
        data[here], scales[here] = q.data, q.scales
        if zero_points is not None:
            zero_points[here] = q.zero_points
    return QuantizedTensor(bits, block_size, (n, k), data, scales, zero_points, f"int{bits}")


def quantize_chunks(w, bits: int, block_size: int, *, symmetric: bool = True, rows: int | None = None,
                    float_zero_points: bool = False):
    """`quantize_linear(w, ...)` as consecutive row chunks (`QuantizedTensor`s of about `rows` rows), for a
    writer that streams them: rows are quantized independently, so the chunks hold the same bytes."""
    for _, _, make in quantized_pieces(w, bits, block_size, symmetric=symmetric, rows=rows,
                                       float_zero_points=float_zero_points):
        yield make()


def quantized_pieces(w, bits: int, block_size: int, *, symmetric: bool = True, rows: int | None = None,
                     float_zero_points: bool = False):
    """`quantize_chunks` as `(start, stop, make)` per chunk, `make()` quantizing rows `start:stop`
    alone (in any thread, in any order)."""
    _check_bits(bits)
    n, k = w.shape
    step = _chunk_rows(-(-k // block_size) * block_size)
    rows = max(step, rows or step) // step * step

    def make(start: int, stop: int) -> QuantizedTensor:
        parts = [_quantize_rows(w[a : min(a + step, stop)], bits, block_size, symmetric, float_zero_points)
                 for a in range(start, stop, step)]
        return parts[0] if len(parts) == 1 else _stacked(parts, bits, block_size, k)

    return [(a, min(a + rows, n), lambda a=a: make(a, min(a + rows, n))) for a in range(0, n, rows)]


def _stacked(parts: list[QuantizedTensor], bits: int, block_size: int, k: int) -> QuantizedTensor:
    zero_points = None if parts[0].zero_points is None else np.concatenate([p.zero_points for p in parts])
    return QuantizedTensor(bits, block_size, (sum(p.shape[0] for p in parts), k),
                           np.concatenate([p.data for p in parts]), np.concatenate([p.scales for p in parts]),
                           zero_points, parts[0].source_type)


def _check_bits(bits: int) -> None:
    if bits not in (4, 8):
        raise ValueError(f"MatMulNBits weights must be 4 or 8 bits, not {bits}")


def _chunk_rows(padded_k: int) -> int:
    return max(1, _CHUNK_ELEMENTS // padded_k)


def _quantize_rows(chunk, bits: int, block_size: int, symmetric: bool, float_zero_points: bool = False) -> QuantizedTensor:
    """One chunk of rows quantized: every value depends on its own block only."""
    chunk = np.asarray(chunk, dtype=np.float32)
    n, k = chunk.shape
    k_blocks = -(-k // block_size)
    if k % block_size:  # the last block is padded with zeros
        blocks = np.zeros((n, k_blocks * block_size), np.float32)
        blocks[:, :k] = chunk
    else:
        blocks = chunk
    blocks = blocks.reshape(-1, k_blocks, block_size)
    zero_points = None
    if float_zero_points and not symmetric:
        codes, scale, minimum = _kquant_blocks(blocks, 2**bits - 1)
        zero_points = np.where(scale > 0, -minimum / np.where(scale > 0, scale, 1), 0).astype(np.float32)
        return QuantizedTensor(bits, block_size, (n, k), pack_codes(codes, bits), scale, zero_points, f"int{bits}")
    if symmetric:
        absmax = np.abs(blocks).max(axis=-1)
        scale = np.where(absmax > 0, absmax / (2 ** (bits - 1) - 1), 1.0).astype(np.float32)
        zero = np.float32(2 ** (bits - 1))
    else:
        lo = np.minimum(blocks.min(axis=-1), 0)
        hi = np.maximum(blocks.max(axis=-1), 0)
        scale = np.where(hi > lo, (hi - lo) / (2**bits - 1), 1.0).astype(np.float32)
        zero = np.clip(np.rint(-lo / scale), 0, 2**bits - 1)
        zero_points = pack_codes(zero.astype(np.uint8), bits)
        zero = zero[..., None]
    # The same operations as clip(rint(blocks / scale) + zero), done in place in one temporary.
    codes = np.divide(blocks, scale[..., None])
    np.rint(codes, out=codes)
    codes += zero
    np.clip(codes, 0, 2**bits - 1, out=codes)
    data = pack_codes(codes.astype(np.uint8), bits)  # element 2i in the low nibble at 4 bits
    return QuantizedTensor(bits, block_size, (n, k), data, scale, zero_points, f"int{bits}")


def _kquant_blocks(blocks, top: int):
    """Codes `[..., B]` uint8 in 0..top, scale and minimum `[...]` float32 per block, fitted as llama.cpp's
    `make_qkx2_quants` fits a Q4_K sub-block (ggml/src/ggml-quants.c; rmin -1, rdelta 0.1, 20 steps): among
    the codes that 21 candidate scales round the block to, the one whose weighted least-squares scale and
    minimum (minimum at most 0; weights `sqrt(mean x^2) + |x|`) leave the smallest weighted error. Scale and
    minimum stay float32, where Q4_K rounds them to 6 bits of a per-256 float16."""
    x = blocks.astype(np.float32)
    weight = np.sqrt((x * x).mean(-1, keepdims=True)) + np.abs(x)
    lo = np.minimum(x.min(-1), 0)
    span = x.max(-1) - lo
    flat = span <= 0
    span = np.where(flat, 1, span)
    sum_w, sum_x = weight.sum(-1), (weight * x).sum(-1)
    best_codes = best_scale = best_min = best_err = None
    for step in (None, *range(21)):
        iscale = (top if step is None else top - 1 + 0.1 * step) / span
        codes = np.clip(np.rint(iscale[..., None] * (x - lo[..., None])), 0, top)
        if step is None:  # the plain range's fit, as the search starts from
            scale, minimum = 1 / iscale, lo
        else:
            sum_l, sum_l2 = (weight * codes).sum(-1), (weight * codes * codes).sum(-1)
            sum_xl = (weight * x * codes).sum(-1)
            det = sum_w * sum_l2 - sum_l * sum_l
            ok = det > 0
            det = np.where(ok, det, 1)
            scale = np.where(ok, (sum_w * sum_xl - sum_x * sum_l) / det, 1 / iscale)
            minimum = np.where(ok, (sum_l2 * sum_x - sum_l * sum_xl) / det, lo)
            positive = minimum > 0  # a minimum above zero is refitted at zero, as Q4_K's is
            scale = np.where(positive, sum_xl / np.where(sum_l2 > 0, sum_l2, 1), scale)
            minimum = np.where(positive, 0, minimum)
        err = (weight * (scale[..., None] * codes + minimum[..., None] - x) ** 2).sum(-1)
        if best_err is None:
            best_codes, best_scale, best_min, best_err = codes, scale, minimum, err
            continue
        better = err < best_err
        best_codes = np.where(better[..., None], codes, best_codes)
        best_scale, best_min = np.where(better, scale, best_scale), np.where(better, minimum, best_min)
        best_err = np.where(better, err, best_err)
    # A block of one value v: codes 0, the minimum v (below zero: a block of zeros has lo 0) and any scale, |v|.
    best_scale = np.where(flat, -lo, best_scale).astype(np.float32)
    best_min = np.where(flat, lo, best_min).astype(np.float32)
    return np.where(flat[..., None], 0, best_codes).astype(np.uint8), best_scale, best_min


def resolve(weight: Weight, scheme: QuantScheme) -> Weight:
    """What to store for one linear weight under `scheme`.

    Returns a float32 array (the emitter casts to the I/O dtype) or a
    QuantizedTensor. A source-quantized tensor is kept bit-exact when the scheme
    keeps the source or asks for the same bits and block size; otherwise it is
    dequantized and, if the scheme says so, re-quantized.
    """
    if isinstance(weight, (QuantizedTensor, QuantizedRows)):
        if _keeps_encoding(weight.bits, weight.block_size, scheme):
            return as_tensor(weight)
        weight = as_rows(weight)  # dequantized a chunk of rows at a time where it is re-quantized
        if scheme.bits is None:
            return weight.dequantize()
    elif scheme.keep_source:
        return np.asarray(weight, dtype=np.float32)
    if scheme.bits is None:
        return np.asarray(weight, dtype=np.float32)
    return quantize_linear(weight, scheme.bits, scheme.block_size, symmetric=scheme.symmetric,
                           float_zero_points=_float_zero_points(scheme))


def materialize(weight: Weight, form: QuantForm | None, *, symmetric: bool) -> Weight:
    """The value stored for a weight whose form the IR's table decided (`passes/quantization.py`).

    None: float32 (dequantized if need be). A block form: the source's blocks when they are that
    form, else the float value quantized to it (`symmetric` or with zero points).
    """
    if form is None:
        if isinstance(weight, (QuantizedTensor, QuantizedRows)):
            return weight.dequantize()
        return np.asarray(weight, dtype=np.float32)
    if isinstance(weight, (QuantizedTensor, QuantizedRows)):
        if (weight.bits, weight.block_size) == (form.bits, form.block_size):
            return as_tensor(weight)
        # Dequantized and re-quantized a chunk of rows at a time: never whole in float32.
        weight = as_rows(weight)
    return quantize_linear(weight, form.bits, form.block_size, symmetric=symmetric,
                           float_zero_points=form.float_zero_points)


def materialized_chunks(weight, form: QuantForm, *, symmetric: bool, rows: int):
    """`materialize(weight, form, ...)` (a block form) as consecutive `QuantizedTensor`s of about
    `rows` rows, for a writer that streams them: the same bytes, a chunk of the tensor at a time."""
    for _, _, make in materialized_pieces(weight, form, symmetric=symmetric, rows=rows):
        yield make()


def materialized_pieces(weight, form: QuantForm, *, symmetric: bool, rows: int):
    """`materialized_chunks` as `(start, stop, make)` per chunk, each `make()` working alone: the
    source's blocks converted, or the weight (dequantized a chunk at a time) quantized."""
    if isinstance(weight, (QuantizedTensor, QuantizedRows)):
        source = as_rows(weight)
        if (weight.bits, weight.block_size) == (form.bits, form.block_size):
            n = source.shape[0]
            return [(a, min(a + rows, n), lambda a=a: source.assembled(a, min(a + rows, n))) for a in range(0, n, rows)]
        weight = source
    return quantized_pieces(weight, form.bits, form.block_size, symmetric=symmetric, rows=rows,
                            float_zero_points=form.float_zero_points)


def as_rows(weight: "QuantizedTensor | QuantizedRows") -> QuantizedRows:
    return weight if isinstance(weight, QuantizedRows) else QuantizedRows.of(weight)


def as_tensor(weight: "QuantizedTensor | QuantizedRows") -> QuantizedTensor:
    return weight.whole() if isinstance(weight, QuantizedRows) else weight


def resolved_form(info: TensorInfo, scheme: QuantScheme) -> QuantForm | None:
    """The form `resolve` gives the tensor `info` describes under `scheme` (None: float), without reading it."""
    if info.quantized:
        if info.bits is None or info.block_size is None:
            raise AssertionError(f"{info.name}: a quantized tensor's info must give its bits and block size")
        if _keeps_encoding(info.bits, info.block_size, scheme):
            return QuantForm(
                info.bits, info.block_size, info.has_zero_points, info.float_zero_points, info.block_offsets
            )
    elif scheme.keep_source:
        return None
    if scheme.bits is None:
        return None
    return QuantForm(scheme.bits, scheme.block_size, not scheme.symmetric, float_zero_points=_float_zero_points(scheme))


def _float_zero_points(scheme: QuantScheme) -> bool:
    """MatMulNBits takes zero points in the scale dtype at 2 and 4 bits."""
    return scheme.float_zero_points and not scheme.symmetric and scheme.bits in (2, 4)


def embedding_form(info: TensorInfo, scheme: QuantScheme, requested: bool = False) -> QuantForm | None:
    """The form a token embedding is stored in under `scheme` (None: float), without reading it.

    An embedding the source stores in float stays float unless `requested` (`embedding_requested`):
    a bits-per-weight default is meant for MatMul weights. One it stores quantized is kept or
    re-quantized as `resolved_form` says when that gives 2, 4 or 8 bits in whole blocks with
    integer zero points (GatherBlockQuantized takes no float ones), and is dequantized
    otherwise. Zero points are always written (GatherBlockQuantized's defaults differ between
    execution providers).
    """
    form = resolved_form(info, scheme) if info.quantized or requested else None
    if form is not None and form.float_zero_points and not info.quantized:
        form = replace(form, float_zero_points=False)  # a float table quantized with integer zero points instead
    if form is None or form.bits not in (2, 4, 8) or info.shape[-1] % form.block_size or form.float_zero_points:
        return None
    return replace(form, has_zero_points=True)


def expert_form(info: TensorInfo, scheme: QuantScheme) -> QuantForm | None:
    """The form a MoE layer's stacked experts `[E, N, K]` take under `scheme` (None: float, for the MoE op).

    QMoE reads symmetric 4- or 8-bit blocks along K with its default zero point, laid out as
    MatMulNBits' (`quantize_experts`); a scheme asking for anything else, or blocks that do not
    tile K, keeps the experts float. A source's blocks with the default zero point and no offsets
    (GGUF Q4_0, Q8_0, Q5_0, Q6_K expert stacks) are carried as stored when the scheme keeps the source
    or asks for their bits and block size; other source types are dequantized (and re-quantized if
    the scheme asks, which `requantization_notes` reports).
    """
    if info.quantized and info.bits is not None and info.block_size is not None and not info.has_zero_points \
            and not info.block_offsets and _keeps_encoding(info.bits, info.block_size, scheme):
        return QuantForm(info.bits, info.block_size, False)  # the source's blocks, carried as stored
    if scheme.keep_source or scheme.bits is None:
        return None
    size = scheme.block_size
    if scheme.bits not in (4, 8) or not scheme.symmetric or size < 16 or size & (size - 1) or info.shape[-1] % size:
        return None
    return QuantForm(scheme.bits, size, False)


def expert_blocks(weight: Weight, form: QuantForm, shape: tuple[int, int, int]) -> QuantizedTensor:
    """Stacked experts `[E, N, K]` in `form`, as one `[E * N, K]` MatMulNBits-layout weight.

    The source's own blocks when they are that form with the default zero point (a GGUF's Q4_0 /
    Q8_0 expert stacks, `gguf` reads them as rows `[E * N, K]`), else the float values quantized
    symmetric (`quantize_linear`; rows are independent, so the stack is quantized expert by expert).
    QMoE's CPU kernel reads this packing (low bits first) and default zero point `2**(bits-1)`.
    """
    if isinstance(weight, QuantizedRows):
        weight = weight.whole() if (weight.bits, weight.block_size) == (form.bits, form.block_size) else weight
    if (
        isinstance(weight, QuantizedTensor)
        and (weight.bits, weight.block_size) == (form.bits, form.block_size)
        and weight.zero_points is None
        and weight.block_offsets is None
    ):
        return weight
    if isinstance(weight, (QuantizedTensor, QuantizedRows)):  # rows [E * N, K], dequantized a chunk at a time
        return quantize_linear(as_rows(weight), form.bits, form.block_size)
    return quantize_linear(np.asarray(weight, np.float32).reshape(-1, shape[-1]), form.bits, form.block_size)


def quantize_experts(weight: Weight, form: QuantForm, shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """QMoE's (weights `[E, N, K * bits / 8]` uint8, scales `[E, N, K / block]`) for stacked experts."""
    e, n, _ = shape
    q = expert_blocks(weight, form, shape)
    return q.data.reshape(e, n, -1), q.scales.reshape(e, n, -1)


def dequantize_experts(weight: Weight, form: QuantForm, shape: tuple[int, int, int]) -> np.ndarray:
    """The float32 values QMoE computes with for experts stored in `form`."""
    return expert_blocks(weight, form, shape).dequantize().reshape(shape)


def embedding_requested(plan: QuantizationPlan, name: str) -> bool:
    """A float embedding is quantized only on request: when an override (not the default) decides it."""
    return plan.deciding_override(name) is not None


def _keeps_encoding(bits: int, block_size: int, scheme: QuantScheme) -> bool:
    """Whether a source-quantized weight is stored as it is rather than dequantized."""
    return scheme.keep_source or (scheme.bits, scheme.block_size) == (bits, block_size)


def requantization_notes(weights: tuple[WeightDecision, ...]) -> list[str]:
    """One note about source-quantized tensors that are not stored as the source stores them."""
    moved: Counter[tuple[str, str, str]] = Counter()
    for w in weights:
        kept = w.form is not None and w.lossless
        if w.source.startswith(("float", "bfloat")) or kept:
            continue
        moved[(w.source, w.result, "dequantized" if w.form is None else "re-quantized")] += 1
    if not moved:
        return []
    parts = ", ".join(f"{n} {src} -> {result} ({how})" for (src, result, how), n in sorted(moved.items()))
    return [
        f"quantized source tensors not carried as stored: {parts}; "
        "see `mtpc plan` for the rule that chose each, and `keep: source` (quantization.default or an override) "
        "to carry what onnxruntime's block-quantized ops can hold as it is"
    ]


def measured_requantization_note(weights: tuple[WeightDecision, ...], errors: dict[str, float]) -> str | None:
    """The re-quantization error measured while writing, per (source type -> result)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for w in weights:
        if w.name in errors:
            groups.setdefault((w.source, w.result), []).append(errors[w.name])
    if not groups:
        return None
    parts = ", ".join(
        f"{src} -> {result}: {max(found):.3g} over {len(found)} tensor{'s' if len(found) > 1 else ''}"
        for (src, result), found in sorted(groups.items())
    )
    return f"re-quantized source tensors, max |stored - the source's dequantization| measured while writing: {parts}"

