"""How canonical weights become planned initializers: float, MatMulNBits or GatherBlockQuantized.

Each weight's stored *form* (float, or bits / block size / zero points / block offsets)
is read from the IR's weight table (`ModelIR.weights`, decided by
`passes/quantization.py` from the tensors' metadata), so the data file is laid out
before any value is read and `plan` shows exactly what is built. When the file is
streamed, `mtpc.quant.materialize` produces the arrays in that form and the stream
checks them against the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import onnx_ir as oir

from ..arrays import transposed
from ..contracts import quantized_names
from ..diagnostics import MtpcError
from ..ir import QuantizationPlan, WeightDecision
from ..quant import QuantForm, materialize
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
    """Initializers for the graph builders, stored as the IR's weight table says (`ModelIR.weights`)."""

    def __init__(
        self,
        store: WeightStore,
        plan: QuantizationPlan,
        io_dtype: str,
        weights: tuple[WeightDecision, ...],
        requantization_error: dict[str, float] | None = None,
    ):
        self.store = store
        self.plan = plan
        self.io_dtype = DTYPES[io_dtype]
        self._decisions = {w.name: w for w in weights}
        # canonical name -> max |stored - source's dequantization|, for source-quantized weights re-quantized
        # when the data file is written (measured then: the plan reads no weight).
        self.requantization_error = requantization_error if requantization_error is not None else {}

    def _measure(self, canonical: str, decision: WeightDecision, stored: QuantizedTensor) -> None:
        if decision.lossless or decision.source.startswith(("float", "bfloat")):
            return
        error = np.abs(stored.dequantize() - self.store.read_float(canonical)).max(initial=0)
        self.requantization_error[canonical] = float(error)

    def _read_rows(self, canonical: str):
        """The weight as `read` gives it, or row by row where the store can (`HFWeightStore.read_rows`:
        bfloat16 widened only where it is copied)."""
        read_rows = getattr(self.store, "read_rows", None)
        return read_rows(canonical) if read_rows is not None else self.store.read(canonical)

    def decision(self, canonical: str) -> WeightDecision:
        """How the IR's weight table stores `canonical` (every weight the graphs use is in it)."""
        decision = self._decisions.get(canonical)
        if decision is None:
            raise AssertionError(f"{canonical}: not in the IR's weight table (passes/quantization.py decides every weight)")
        return decision

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
        n, k = self.store.info(canonical).shape
        decision = self.decision(canonical)
        form = decision.form
        if form is None:
            planned = (PlannedTensor(f"{stem}.weight", self.io_dtype, (k, n)),)

            def produce_float() -> tuple[np.ndarray, ...]:
                w = self._read_rows(canonical)
                if isinstance(w, QuantizedTensor):
                    w = materialize(w, None, symmetric=True)
                # Transposed tile by tile straight into the stored dtype: one output, no temporaries.
                return (transposed(w, self.io_dtype.numpy()),)

            return LinearParams(n, k, InitializerGroup(planned, produce_float), None)
        planned = _quantized_tensors(stem + ".weight", n, k, form, self.io_dtype, offsets_by_block=True)

        def produce_quantized() -> tuple[np.ndarray, ...]:
            # Quantized a few rows at a time (quant.quantize_linear), so a float source is never whole in float32.
            w = materialize(self._read_rows(canonical), form, symmetric=not form.has_zero_points)
            if not isinstance(w, QuantizedTensor):
                raise AssertionError(f"{canonical}: planned a quantized weight, resolve gave float")
            self._measure(canonical, decision, w)
            return _quantized_arrays(canonical, w, form, self.io_dtype, offsets_by_block=True)

        return LinearParams(n, k, InitializerGroup(planned, produce_quantized), form, decision.accuracy_level)

    def packed_linear(self, parts: Sequence[LinearParams], stem: str) -> LinearParams:
        """Projections of one input stored in one form, as one: their weights side by side along N.

        `y = x @ [W_1; W_2; ...]^T` is `[y_1 | y_2 | ...]`: every output column is the same dot
        product as in the separate projections, so a Split after it gives the same values.
        """
        first = parts[0]
        if any((p.quant, p.accuracy_level, p.k) != (first.quant, first.accuracy_level, first.k) for p in parts):
            raise AssertionError(f"{stem}: only projections stored alike can be packed")
        n = sum(p.n for p in parts)
        if first.quant is None:
            planned = (PlannedTensor(f"{stem}.weight", self.io_dtype, (first.k, n)),)
        else:
            planned = _quantized_tensors(stem + ".weight", n, first.k, first.quant, self.io_dtype, offsets_by_block=True)
        # The N axis of each tensor is the one the parts' shapes add up along ([k, n] floats and
        # [k_blocks, n] offsets: 1; MatMulNBits data, scales and zero points: 0).
        axes = [next(d for d, size in enumerate(t.shape) if size != first.group.tensors[j].shape[d])
                for j, t in enumerate(planned)]

        def produce() -> tuple[np.ndarray, ...]:
            arrays = [p.group.produce() for p in parts]
            return tuple(np.concatenate([a[j] for a in arrays], axis=axes[j]) for j in range(len(planned)))

        return LinearParams(n, first.k, InitializerGroup(planned, produce), first.quant, first.accuracy_level)

    # ------------------------------------------------------------------ embedding

    def embedding(self, canonical: str, name: str) -> EmbeddingParams:
        """Float for Gather, or GatherBlockQuantized tensors when `quant.embedding_form` says so (a
        source-quantized table its scheme keeps or re-quantizes at 4 or 8 bits in whole blocks)."""
        info = self.store.info(canonical)
        vocab, hidden = info.shape
        scheme = self.plan.scheme_for(canonical)
        decision = self.decision(canonical)
        form = decision.form
        if form is None:
            return EmbeddingParams(vocab, hidden, self.tensor(canonical, name), None)
        planned = _quantized_tensors(name, vocab, hidden, form, self.io_dtype, offsets_by_block=False)
        flat = (vocab, hidden * form.bits // 8)
        planned = (PlannedTensor(planned[0].name, planned[0].dtype, flat),) + planned[1:]

        def produce() -> tuple[np.ndarray, ...]:
            w = materialize(self.store.read(canonical), form, symmetric=scheme.symmetric)
            assert isinstance(w, QuantizedTensor)
            self._measure(canonical, decision, w)
            data, *rest = _quantized_arrays(canonical, w, form, self.io_dtype, offsets_by_block=False)
            return (data.reshape(flat), *rest)

        return EmbeddingParams(vocab, hidden, InitializerGroup(planned, produce), form)


def _quantized_tensors(
    base: str, n: int, k: int, form: QuantForm, scale_dtype: oir.DataType, *, offsets_by_block: bool
) -> tuple[PlannedTensor, ...]:
    """Data, scales, then zero points and block offsets when the form has them.

    Offsets are `[k_blocks, n]` for a MatMul (the graph multiplies the activations' block sums
    by them) and `[n, k_blocks]` for a Gather (the graph gathers a row of them per token).
    """
    data, scales, zero_points = quantized_names(base, form.bits)
    k_blocks = -(-k // form.block_size)
    tensors = (
        PlannedTensor(data, oir.DataType.UINT8, (n, k_blocks, form.block_size * form.bits // 8)),
        PlannedTensor(scales, scale_dtype, (n, k_blocks)),
    )
    if form.float_zero_points:
        tensors += (PlannedTensor(zero_points, scale_dtype, (n, k_blocks)),)
    elif form.has_zero_points:
        tensors += (PlannedTensor(zero_points, oir.DataType.UINT8, (n, -(-k_blocks * form.bits // 8))),)
    if form.block_offsets:
        shape = (k_blocks, n) if offsets_by_block else (n, k_blocks)
        tensors += (PlannedTensor(block_offsets_name(base), scale_dtype, shape),)
    return tensors


def block_offsets_name(base: str) -> str:
    return f"{base}_offsets"


def _quantized_arrays(
    canonical: str, w: QuantizedTensor, form: QuantForm, scale_dtype: oir.DataType, *, offsets_by_block: bool
) -> tuple[np.ndarray, ...]:
    if (w.bits, w.block_size) != (form.bits, form.block_size):
        raise AssertionError(f"planned {form}, resolve gave {w.bits}-bit blocks of {w.block_size}")
    floats = w.zero_points is not None and w.zero_points.dtype.kind == "f"
    if floats != form.float_zero_points or (w.block_offsets is not None) != form.block_offsets:
        raise AssertionError(f"{canonical}: planned {form}, resolve gave other zero points or offsets")
    arrays: tuple[np.ndarray, ...] = (w.data, w.scales)
    if form.has_zero_points:
        arrays += (w.zero_points if w.zero_points is not None else _default_zero_points(w),)
    if w.block_offsets is not None:
        arrays += (w.block_offsets.T if offsets_by_block else w.block_offsets,)
    _check_range(canonical, arrays[1:], scale_dtype)
    return arrays


def _check_range(canonical: str, arrays, dtype: oir.DataType) -> None:
    """A float16 graph holds a kept block encoding only if its scales, zero points and offsets fit."""
    if dtype != oir.DataType.FLOAT16:
        return
    limit = float(np.finfo(np.float16).max)
    for a in arrays:
        if a.dtype.kind == "f" and np.abs(a).max(initial=0) > limit:
            raise MtpcError.single(
                f"{canonical}: its block scales reach {np.abs(a).max():.4g}, beyond float16's {limit:.0f}, so a "
                "float16 graph cannot hold the source's encoding",
                hint=f"use precision.io_dtype: float32, or an override {{match: {canonical}, bits: null}}",
                path="precision.io_dtype",
            )


def _default_zero_points(w: QuantizedTensor) -> np.ndarray:
    """The op's implicit zero point 2**(bits-1), written out packed (low bits first)."""
    n, k_blocks = w.scales.shape
    per = 8 // w.bits
    byte = sum((2 ** (w.bits - 1)) << (j * w.bits) for j in range(per))  # 0x80, 0x88, 0xAA
    return np.full((n, -(-k_blocks // per)), byte, np.uint8)
