"""How canonical weights become planned initializers: float, MatMulNBits or GatherBlockQuantized.

Each weight's stored *form* (float, or bits / block size / zero points / block offsets)
is read from the IR's weight table (`ModelIR.weights`, decided by
`passes/quantization.py` from the tensors' metadata), so the data file is laid out
before any value is read and `plan` shows exactly what is built. When the file is
streamed, `mtpc.weights.quant.materialize` produces the arrays in that form and the stream
checks them against the table.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import onnx_ir as oir

from ..util.arrays import can_slice_columns, slab_rows, transposed, transposed_slab
from ..ir.contracts import quantized_names
from ..util.diagnostics import MtpcError
from ..ir import QuantizationPlan, WeightDecision, WeightRole
from ..weights.quant import QuantForm, materialize, materialized_pieces
from ..weights import QuantizedTensor, WeightStore
from .initializers import InitializerGroup, PlannedTensor

# A weight whose first stored tensor is at least this large is written a slab of about this size at a
# time (`InitializerGroup.pieces`): memory then grows with the slab, not with the largest weight.
STREAM_BYTES = 4 << 20
# Rows compared at a time when the re-quantization error is measured.
_CHUNK_ELEMENTS = 1 << 18

DTYPES = {"float32": oir.DataType.FLOAT, "float16": oir.DataType.FLOAT16, "bfloat16": oir.DataType.BFLOAT16}


@dataclass(frozen=True)
class LinearParams:
    """One projection `y = x @ W^T` with W `[n, k]`: a float `[k, n]` MatMul operand or MatMulNBits tensors."""

    n: int
    k: int
    group: InitializerGroup
    quant: QuantForm | None
    accuracy_level: int = 0
    # A float weight's `[k, n]` operand as slabs of the given number of rows, a callable each
    # (`arrays.transposed_slab`; None from it: not sliceable), for a packed projection to stream its parts side by side.
    slabs: Callable[[int], list[Callable[[], np.ndarray]] | None] | None = None


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
        self._measuring = threading.Lock()

    def _measures(self, decision: WeightDecision) -> bool:
        return not (decision.lossless or decision.source.startswith(("float", "bfloat")))

    def _measure(self, canonical: str, decision: WeightDecision, stored: QuantizedTensor, start: int = 0) -> None:
        """Track max |stored - source's dequantization| over rows `start:` of the weight (all of it, or
        one streamed chunk: the maximum over chunks is the whole's), comparing a chunk of rows at a time."""
        if not self._measures(decision):
            return
        source = self._float_rows(canonical)
        error = 0.0
        step = max(1, _CHUNK_ELEMENTS // max(1, stored.shape[1]))
        for a in range(0, stored.shape[0], step):
            b = min(a + step, stored.shape[0])
            diff = np.abs(stored.rows(a, b).dequantize() - source[start + a : start + b])
            error = max(error, float(diff.max(initial=0)))
        with self._measuring:  # chunks of one weight are measured in several threads
            self.requantization_error[canonical] = max(error, self.requantization_error.get(canonical, 0.0))

    def _read_rows(self, canonical: str):
        """The weight as `read` gives it, or row by row where the store can (`HFWeightStore.read_rows`:
        bfloat16 widened only where it is copied; `GGUFWeightStore.read_rows`: block forms converted
        and dequantized a chunk of rows at a time)."""
        read_rows = getattr(self.store, "read_rows", None)
        return read_rows(canonical) if read_rows is not None else self.store.read(canonical)

    def _float_rows(self, canonical: str):
        read = getattr(self.store, "read_float_rows", None)
        return read(canonical) if read is not None else self.store.read_float(canonical)

    def release(self, canonical: str) -> None:
        """The weight is written: its source pages may leave the process (`release`, where the store has it)."""
        release = getattr(self.store, "release", None)
        if release is not None:
            release(canonical)

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

        planned = (PlannedTensor(name, dtype, shape),)
        written = lambda: self.release(canonical)  # noqa: E731
        if len(shape) != 2 or not _streams(planned):
            return InitializerGroup(planned, produce, written=written)

        def pieces() -> list[Callable[[], tuple[np.ndarray, ...]]]:
            rows = self._float_rows(canonical)
            step = max(1, STREAM_BYTES // max(1, shape[1] * 4))
            return [lambda a=a: (np.asarray(rows[a : a + step], dtype=np.float32),) for a in range(0, shape[0], step)]

        return InitializerGroup(planned, produce, pieces, written=written)

    # ------------------------------------------------------------------ linear weights

    def linear(self, canonical: str, stem: str) -> LinearParams:
        n, k = self.store.info(canonical).shape
        decision = self.decision(canonical)
        form = decision.form
        if form is None:
            # Routers stay float32 whatever the I/O dtype: a token's experts are chosen from their scores.
            dtype = oir.DataType.FLOAT if decision.role is WeightRole.ROUTER else self.io_dtype
            planned = (PlannedTensor(f"{stem}.weight", dtype, (k, n)),)

            def produce_float() -> tuple[np.ndarray, ...]:
                w = self._read_rows(canonical)
                if isinstance(w, QuantizedTensor):
                    w = materialize(w, None, symmetric=True)
                # Transposed tile by tile straight into the stored dtype: one output, no temporaries.
                return (transposed(w, dtype.numpy()),)

            def slabs(rows: int) -> list[Callable[[], np.ndarray]] | None:
                """The `[k, n]` operand as slabs of `rows` rows, each made alone; None where the weight
                dequantizes by whole rows only (it is then transposed whole)."""
                w = self._read_rows(canonical)
                if not can_slice_columns(w):
                    return None
                return [lambda a=a: transposed_slab(w, dtype.numpy(), a, min(a + rows, k)) for a in range(0, k, rows)]

            def pieces() -> list[Callable[[], tuple[np.ndarray, ...]]]:
                made = slabs(slab_rows(n, dtype.numpy(), STREAM_BYTES))
                return [lambda make=make: (make(),) for make in made] if made else []

            group = InitializerGroup(planned, produce_float, pieces if _streams(planned) else None,
                                     written=lambda: self.release(canonical))
            return LinearParams(n, k, group, None, slabs=slabs)
        planned = _quantized_tensors(stem + ".weight", n, k, form, self.io_dtype, offsets_by_block=True)
        symmetric = not form.has_zero_points

        def produce_quantized() -> tuple[np.ndarray, ...]:
            # Quantized a few rows at a time (quant.quantize_linear), so a float source is never whole in float32.
            w = materialize(self._read_rows(canonical), form, symmetric=symmetric)
            if not isinstance(w, QuantizedTensor):
                raise AssertionError(f"{canonical}: planned a quantized weight, resolve gave float")
            self._measure(canonical, decision, w)
            return _quantized_arrays(canonical, w, form, self.io_dtype, offsets_by_block=True)

        def pieces() -> list[Callable[[], tuple[np.ndarray, ...]]]:
            return self._quantized_pieces(canonical, decision, form, symmetric, offsets_by_block=True)

        group = InitializerGroup(planned, produce_quantized, pieces if _streams(planned) else None,
                                 _axes(planned, form, offsets_by_block=True), lambda: self.release(canonical))
        return LinearParams(n, k, group, form, decision.accuracy_level)

    def _quantized_pieces(self, canonical: str, decision: WeightDecision, form: QuantForm, symmetric: bool, *,
                          offsets_by_block: bool) -> list[Callable[[], tuple[np.ndarray, ...]]]:
        """`materialize`'s arrays a chunk of rows at a time (`quant.materialized_pieces`): a block-quantized
        source converted, or a float or dequantized one quantized, never whole in memory."""
        w = self._read_rows(canonical)
        rows = max(1, STREAM_BYTES * 8 // max(1, w.shape[-1] * form.bits))  # about STREAM_BYTES of packed data

        def piece(start: int, make) -> tuple[np.ndarray, ...]:
            chunk = make()
            self._measure(canonical, decision, chunk, start)
            return _quantized_arrays(canonical, chunk, form, self.io_dtype, offsets_by_block=offsets_by_block)

        made = materialized_pieces(w, form, symmetric=symmetric, rows=rows)
        if made[-1][1] != w.shape[0]:
            raise AssertionError(f"{canonical}: pieces cover {made[-1][1]} of {w.shape[0]} rows")
        return [lambda start=start, make=make: piece(start, make) for start, _, make in made]

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

        def pieces() -> list[Callable[[], tuple[np.ndarray, ...]]]:
            if first.quant is not None:
                # The parts' rows one after the other are the packed weight's rows (and its offsets' columns).
                return [piece for p in parts for piece in p.group.work()]
            # Slabs of the same rows of every part, side by side: no whole part, no whole packed operand.
            made = [p.slabs(slab_rows(n, self.io_dtype.numpy(), STREAM_BYTES)) if p.slabs else None for p in parts]
            if any(m is None for m in made):
                return []  # a part that dequantizes by whole rows: the packed operand is made whole
            return [lambda row=row: (np.concatenate([make() for make in row], axis=1),) for row in zip(*made)]

        def written() -> None:
            for p in parts:
                if p.group.written is not None:
                    p.group.written()

        group = InitializerGroup(planned, produce, pieces if _streams(planned) else None,
                                 None if first.quant is None else first.group.axes, written)
        return LinearParams(n, first.k, group, first.quant, first.accuracy_level)

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

        def pieces() -> list[Callable[[], tuple[np.ndarray, ...]]]:
            def flattened(make) -> tuple[np.ndarray, ...]:
                data, *rest = make()
                return (data.reshape(data.shape[0], flat[1]), *rest)

            made = self._quantized_pieces(canonical, decision, form, scheme.symmetric, offsets_by_block=False)
            return [lambda make=make: flattened(make) for make in made]

        group = InitializerGroup(planned, produce, pieces if _streams(planned) else None,
                                 _axes(planned, form, offsets_by_block=False), lambda: self.release(canonical))
        return EmbeddingParams(vocab, hidden, group, form)


def _streams(planned: tuple[PlannedTensor, ...]) -> bool:
    """Whether a weight is large enough to be written a chunk at a time (`InitializerGroup.pieces`)."""
    return planned[0].nbytes >= STREAM_BYTES


def _axes(planned: tuple[PlannedTensor, ...], form: QuantForm, *, offsets_by_block: bool) -> tuple[int, ...]:
    """The axis each quantized tensor's row chunks run along: the weight's rows, which are the
    columns of MatMul block offsets `[k_blocks, n]` (the last tensor when the form has them)."""
    axes = [0] * len(planned)
    if form.block_offsets and offsets_by_block:
        axes[-1] = 1
    return tuple(axes)


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
