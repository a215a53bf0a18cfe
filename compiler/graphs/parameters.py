"""How canonical weights become planned initializers: float, MatMulNBits or GatherBlockQuantized.

The decision for each linear weight is `mtpc.quant.resolve` under the plan's
scheme for that weight. To lay out the data file before any value is read, the
resolved *form* (float, or bits / block size / zero points) is predicted by
`mtpc.quant.resolved_form` from the tensor's metadata; when the file is
streamed, `resolve` runs for real and the stream checks the produced arrays
against the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as oir

from ..contracts import quantized_names
from ..ir import QuantizationPlan
from ..quant import QuantForm, embedding_form, resolve, resolved_form
from ..weights import QuantizedTensor, WeightStore
from .initializers import InitializerGroup, PlannedTensor

DTYPES = {"float32": oir.DataType.FLOAT, "float16": oir.DataType.FLOAT16, "bfloat16": oir.DataType.BFLOAT16}


@dataclass(frozen=True)
class LinearParams:
    """One projection `y = x @ W^T` with W `[n, k]`: a float `[k, n]` MatMul operand or MatMulNBits tensors."""

    n: int
    k: int
    group: InitializerGroup
    quant: QuantForm | None
    accuracy_level: int = 0


@dataclass(frozen=True)
class EmbeddingParams:
    """A token embedding `[vocab, hidden]`: float for Gather, or GatherBlockQuantized tensors."""

    vocab: int
    hidden: int
    group: InitializerGroup
    quant: QuantForm | None


class ParameterSource:
    def __init__(self, store: WeightStore, plan: QuantizationPlan, io_dtype: str):
        self.store = store
        self.plan = plan
        self.io_dtype = DTYPES[io_dtype]

    # ------------------------------------------------------------------ plain tensors

    def tensor(self, canonical: str, name: str, *, dtype: oir.DataType | None = None) -> InitializerGroup:
        """A non-linear tensor (norm scale, conv kernel, gate vector) as float, dequantized if need be."""
        dtype = dtype or self.io_dtype
        shape = tuple(self.store.info(canonical).shape)

        def produce() -> tuple[np.ndarray, ...]:
            return (self.store.read_float(canonical),)

        return InitializerGroup((PlannedTensor(name, dtype, shape),), produce)

    # ------------------------------------------------------------------ linear weights

    def linear(self, canonical: str, stem: str) -> LinearParams:
        scheme = self.plan.scheme_for(canonical)
        n, k = self.store.info(canonical).shape
        form = resolved_form(self.store.info(canonical), scheme)
        if form is None:
            planned = (PlannedTensor(f"{stem}.weight", self.io_dtype, (k, n)),)

            def produce_float() -> tuple[np.ndarray, ...]:
                w = resolve(self.store.read(canonical), scheme)
                return (np.asarray(w).T,)

            return LinearParams(n, k, InitializerGroup(planned, produce_float), None)
        planned = _quantized_tensors(stem + ".weight", n, k, form, self.io_dtype)

        def produce_quantized() -> tuple[np.ndarray, ...]:
            w = resolve(self.store.read(canonical), scheme)
            if not isinstance(w, QuantizedTensor):
                raise AssertionError(f"{canonical}: planned a quantized weight, resolve gave float")
            return _quantized_arrays(w, form)

        return LinearParams(n, k, InitializerGroup(planned, produce_quantized), form, scheme.accuracy_level)

    # ------------------------------------------------------------------ embedding

    def embedding(self, canonical: str, name: str) -> EmbeddingParams:
        """Float for Gather, or GatherBlockQuantized tensors when `quant.embedding_form` says so (a
        source-quantized table its scheme keeps or re-quantizes at 4 or 8 bits in whole blocks)."""
        info = self.store.info(canonical)
        vocab, hidden = info.shape
        scheme = self.plan.scheme_for(canonical)
        form = embedding_form(info, scheme)
        if form is None:
            return EmbeddingParams(vocab, hidden, self.tensor(canonical, name), None)
        planned = _quantized_tensors(name, vocab, hidden, form, self.io_dtype)
        flat = (vocab, hidden * form.bits // 8)
        planned = (PlannedTensor(planned[0].name, planned[0].dtype, flat),) + planned[1:]

        def produce() -> tuple[np.ndarray, ...]:
            w = resolve(self.store.read(canonical), scheme)
            assert isinstance(w, QuantizedTensor)
            data, scales, zero_points = _quantized_arrays(w, form)
            return data.reshape(flat), scales, zero_points

        return EmbeddingParams(vocab, hidden, InitializerGroup(planned, produce), form)


def _quantized_tensors(base: str, n: int, k: int, form: QuantForm, scale_dtype: oir.DataType):
    data, scales, zero_points = quantized_names(base, form.bits)
    k_blocks = -(-k // form.block_size)
    tensors = (
        PlannedTensor(data, oir.DataType.UINT8, (n, k_blocks, form.block_size * form.bits // 8)),
        PlannedTensor(scales, scale_dtype, (n, k_blocks)),
    )
    if form.has_zero_points:
        tensors += (PlannedTensor(zero_points, oir.DataType.UINT8, (n, -(-k_blocks * form.bits // 8))),)
    return tensors


def _quantized_arrays(w: QuantizedTensor, form: QuantForm) -> tuple[np.ndarray, ...]:
    if (w.bits, w.block_size) != (form.bits, form.block_size):
        raise AssertionError(f"planned {form}, resolve gave {w.bits}-bit blocks of {w.block_size}")
    arrays: tuple[np.ndarray, ...] = (w.data, w.scales)
    if form.has_zero_points:
        arrays += (w.zero_points if w.zero_points is not None else _default_zero_points(w),)
    return arrays


def _default_zero_points(w: QuantizedTensor) -> np.ndarray:
    """The op's implicit zero point 2**(bits-1), written out packed."""
    n, k_blocks = w.scales.shape
    if w.bits == 8:
        return np.full((n, k_blocks), 128, np.uint8)
    # two 4-bit zero points per byte, block 2b in the low nibble
    return np.full((n, -(-k_blocks // 2)), 0x88, np.uint8)
