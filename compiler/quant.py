"""Weight quantization for MatMulNBits, and the per-tensor decision of what to store.

Float weights are quantized round-to-nearest, symmetric, per block along K, into
onnxruntime's MatMulNBits layout with the op's default zero point
(`2**(bits-1)`), so no zero-point tensor is needed. Weights the source already
stores quantized (GGUF Q4_0 / Q8_0) arrive as `QuantizedTensor`s and are carried
over untouched when the plan asks for the same encoding.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from .ir import QuantForm, QuantScheme, WeightDecision
from .weights import QuantizedTensor, TensorInfo, Weight


def quantize_linear(w: np.ndarray, bits: int, block_size: int) -> QuantizedTensor:
    """Quantize an `[N, K]` float weight (nn.Linear layout) for MatMulNBits."""
    if bits not in (4, 8):
        raise ValueError(f"MatMulNBits weights must be 4 or 8 bits, not {bits}")
    w = np.asarray(w, dtype=np.float32)
    n, k = w.shape
    k_blocks = -(-k // block_size)
    padded = np.zeros((n, k_blocks * block_size), np.float32)
    padded[:, :k] = w
    blocks = padded.reshape(n, k_blocks, block_size)
    qmax = 2 ** (bits - 1) - 1
    absmax = np.abs(blocks).max(axis=-1)
    scales = np.where(absmax > 0, absmax / qmax, 1.0).astype(np.float32)
    zero = 2 ** (bits - 1)
    q = np.clip(np.rint(blocks / scales[..., None]) + zero, 0, 2**bits - 1).astype(np.uint8)
    if bits == 4:
        q = q.reshape(n, k_blocks, block_size // 2, 2)
        data = (q[..., 0] | (q[..., 1] << 4)).astype(np.uint8)  # element 2i low nibble, 2i+1 high
    else:
        data = q
    return QuantizedTensor(bits, block_size, (n, k), np.ascontiguousarray(data), scales, None, f"int{bits}")


def resolve(weight: Weight, scheme: QuantScheme) -> Weight:
    """What to store for one linear weight under `scheme`.

    Returns a float32 array (the emitter casts to the I/O dtype) or a
    QuantizedTensor. A source-quantized tensor is kept bit-exact when the scheme
    keeps the source or asks for the same bits and block size; otherwise it is
    dequantized and, if the scheme says so, re-quantized.
    """
    if isinstance(weight, QuantizedTensor):
        if _keeps_encoding(weight.bits, weight.block_size, scheme):
            return weight
        weight = weight.dequantize()
    elif scheme.keep_source:
        return np.asarray(weight, dtype=np.float32)
    if scheme.bits is None:
        return np.asarray(weight, dtype=np.float32)
    return quantize_linear(weight, scheme.bits, scheme.block_size)


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
    return QuantForm(scheme.bits, scheme.block_size, False)


def embedding_form(info: TensorInfo, scheme: QuantScheme) -> QuantForm | None:
    """The form a token embedding is stored in under `scheme` (None: float), without reading it.

    An embedding the source stores in float stays float. One it stores quantized is kept or
    re-quantized as `resolved_form` says when that gives 2, 4 or 8 bits in whole blocks with
    integer zero points (GatherBlockQuantized takes no float ones), and is dequantized
    otherwise. Zero points are always written (GatherBlockQuantized's defaults differ between
    execution providers).
    """
    form = resolved_form(info, scheme) if info.quantized else None
    if form is None or form.bits not in (2, 4, 8) or info.shape[-1] % form.block_size or form.float_zero_points:
        return None
    return replace(form, has_zero_points=True)


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
