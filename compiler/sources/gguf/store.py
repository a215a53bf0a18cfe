"""The weight store of a GGUF file: canonical weights read lazily from its memory map.

`layout` resolves where each canonical tensor lives and how the converter changed it (`Layout`);
this module reads the bytes and undoes those changes: value heads regrouped (whole rows, or whole
blocks along K), block-quantized weights handed out in their exact MatMulNBits /
GatherBlockQuantized form (`quant`), other types dequantized by gguf-py.

`read_rows` gives a weight a chunk of rows at a time (`QuantizedRows` for the block forms,
`DequantizedRows` for what gguf-py dequantizes): every transform moves whole rows or moves
columns within each row, so any chunk's bytes are those rows of `read`'s. A 27B model's LM head
(1.3 G weights) is then never held whole, in float32 or in its block form. `release` drops a
weight's pages from the process once it is written (they stay in the page cache).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

import numpy as np

from ...util.diagnostics import SourceError
from ...weights import QuantizedRows, QuantizedTensor, TensorInfo, Weight, described_info, unpack_codes
from .layout import Entry, carried_form, entry_of, layout_of, op_for, open_header, served_names, source_tensor
from .constants import GGMLQuantizationType as QT
from .header import TensorInfo as GGUFTensorInfo
from .metadata import Metadata
from .names import Transform
from .quant import pack, quantized_rows


def _regroup_value_heads(a: np.ndarray, axis: int, start: int, n_k: int, n_v: int) -> np.ndarray:
    """Tiled -> grouped value heads on `a[start:]` along `axis` (head p = j*n_k + g holds grouped g*r + j)."""
    if n_v == n_k:
        return a
    r = n_v // n_k
    moved = np.moveaxis(a, axis, 0)
    head, tail = moved[:start], moved[start:]
    per_head = tail.shape[0] // n_v
    tail = tail.reshape(r, n_k, per_head, *tail.shape[1:]).swapaxes(0, 1).reshape(tail.shape)
    return np.moveaxis(np.concatenate([head, tail], axis=0), 0, axis)


def rope_row_order(arch, transform: Transform, rows: int) -> np.ndarray:
    """The source row of each canonical row of an MLA weight whose rope rows the converter left interleaved
    (pairs 2i, 2i+1, llama.cpp's ROPE_TYPE_NORM): canonical half-split rope row i reads 2i, row d/2 + i reads 2i + 1."""
    mla = arch.mla
    d = mla.qk_rope_head_dim
    rope = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    if transform is Transform.ROPE_ROWS_LAST:  # [latent | k_rope]
        return np.concatenate([np.arange(rows - d), rows - d + rope])
    per_head = mla.qk_head_dim  # [nope | rope] per head
    head = np.concatenate([np.arange(mla.qk_nope_head_dim), mla.qk_nope_head_dim + rope])
    return (np.arange(rows // per_head)[:, None] * per_head + head).reshape(-1)


def _take_blocks(q: QuantizedTensor, blocks: np.ndarray) -> QuantizedTensor:
    """`q` with its blocks along K in the order `blocks` (zero points unpacked to move, then repacked)."""
    zero_points = q.zero_points
    if zero_points is not None and zero_points.dtype.kind == "f":
        zero_points = zero_points[:, blocks]
    elif zero_points is not None:
        codes = unpack_codes(zero_points, q.bits)[:, : q.scales.shape[1]]
        zero_points = pack(np.ascontiguousarray(codes[:, blocks]), q.bits)
    return replace(
        q,
        data=np.ascontiguousarray(q.data[:, blocks]),
        scales=np.ascontiguousarray(q.scales[:, blocks]),
        zero_points=None if zero_points is None else np.ascontiguousarray(zero_points),
        block_offsets=None if q.block_offsets is None else np.ascontiguousarray(q.block_offsets[:, blocks]),
    )


class DequantizedRows:
    """A GGUF weight gguf-py dequantizes, a chunk of rows at a time (`w[a:b]`, float32)."""

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, shape: tuple[int, int], rows):
        self.shape = tuple(shape)
        self._rows = rows

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError("DequantizedRows takes a slice of rows")
        start, stop, _ = rows.indices(self.shape[0])
        return self._rows(start, max(start, stop))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        full = self[:]
        return full if dtype is None else full.astype(dtype, copy=False)


class GGUFWeightStore:
    """Canonical weights of a GGUF file, read lazily from the memory map."""

    def __init__(self, path: str):
        self._path = path
        self._header = open_header(path)
        self._layout = layout_of(Metadata(self._header, path))
        self._tensors = self._header.tensors

    def names(self) -> Iterable[str]:
        return served_names(self._layout)

    def _entry(self, name: str) -> Entry:
        return entry_of(self._layout, name, self._path)

    def info(self, name: str) -> TensorInfo:
        return described_info(source_tensor(self._layout, self._tensors, name))

    def read(self, name: str) -> Weight:
        rows = self._quantized_rows(name)
        return self.read_float(name) if rows is None else rows.whole()

    def read_rows(self, name: str) -> "QuantizedRows | DequantizedRows | np.ndarray":
        """`read`, a chunk of rows at a time: `QuantizedRows` for a block form, `DequantizedRows` for a
        2-D weight gguf-py dequantizes, the array itself for anything else."""
        rows = self._quantized_rows(name)
        return rows if rows is not None else self.read_float_rows(name)

    def read_float_rows(self, name: str) -> "DequantizedRows | np.ndarray":
        """`read_float`, a chunk of rows at a time where the weight is a 2-D matrix."""
        entry = self._entry(name)
        if len(entry.gguf_shape) != 2 or entry.canonical_shape != entry.gguf_shape:
            return self.read_float(name)
        tensor = self._tensors[entry.gguf]
        order = self._row_order(entry)
        n, k = entry.gguf_shape

        def rows(start: int, stop: int) -> np.ndarray:
            raw = self._data(tensor).reshape(n, -1)
            raw = raw[start:stop] if order is None else raw[order[start:stop]]
            value = self._dequantized(entry, tensor, raw).reshape(stop - start, k)
            if entry.transform is Transform.VALUE_COLUMNS:
                value = self._regroup(value, entry.transform)
            return value.astype(np.float32, copy=False)

        return DequantizedRows((n, k), rows)

    def _quantized_rows(self, name: str) -> QuantizedRows | None:
        """The weight's exact block form, converted a chunk of rows at a time; None when it reads as float."""
        entry = self._entry(name)
        tensor = self._tensors[entry.gguf]
        if carried_form(self._layout, entry, tensor.type, op_for(name)) is None:
            return None
        *rows, k = entry.gguf_shape
        n = int(np.prod(rows))  # an expert stack [E, N, K] is E * N rows
        source = quantized_rows(self._data(tensor), tensor.type, n, k, op_for(name))
        if entry.transform is Transform.NONE:
            return source
        if entry.transform is Transform.VALUE_COLUMNS:
            n_k, n_v, _ = self._layout.heads
            order = _regroup_value_heads(np.arange(k), 0, 0, n_k, n_v)
            blocks = order.reshape(-1, source.block_size)[:, 0] // source.block_size
            chunk = lambda start, stop: _take_blocks(source.chunk(start, stop), blocks)  # noqa: E731
        else:
            raw = self._data(tensor).reshape(n, -1)
            order = self._row_order(entry)
            if order is None:
                return source
            n = len(order)
            chunk = lambda start, stop: quantized_rows(  # noqa: E731
                raw[order[start:stop]], tensor.type, stop - start, k, op_for(name)).chunk(0, stop - start)
        return QuantizedRows(source.bits, source.block_size, (n, k), chunk, source.source_type)

    def _row_order(self, entry: Entry) -> np.ndarray | None:
        """The source row each canonical row is read from, when the transform moves rows."""
        if entry.transform in (Transform.NONE, Transform.VALUE_COLUMNS, Transform.CONV1D):
            return None
        order = self._regroup(np.arange(entry.gguf_shape[0]), entry.transform)
        return None if np.array_equal(order, np.arange(len(order))) else order

    def read_float(self, name: str) -> np.ndarray:
        entry = self._entry(name)
        tensor = self._tensors[entry.gguf]
        value = self._dequantized(entry, tensor, self._data(tensor))
        if entry.transform is Transform.KV_B_SPLIT:
            return self._kv_b(entry, value)
        value = value.reshape(entry.gguf_shape)
        if entry.transform is not Transform.NONE:
            value = self._regroup(value, entry.transform)
        return value.reshape(entry.canonical_shape).astype(np.float32, copy=False)

    def _dequantized(self, entry: Entry, tensor: GGUFTensorInfo, raw: np.ndarray) -> np.ndarray:
        if tensor.type == QT.F32:
            return raw
        from gguf.quants import dequantize  # gguf-py is imported where a weight is dequantized

        try:
            return dequantize(raw, tensor.type)
        except NotImplementedError:
            raise SourceError(
                f"{self._path}: GGUF tensor {entry.gguf} has type {tensor.type.name}, which gguf-py cannot dequantize"
            ) from None

    def _kv_b(self, entry: Entry, k_b: np.ndarray) -> np.ndarray:
        """MLA's kv_b_proj `[N * (nope + v), R]` from the converter's `attn_k_b` `[N, R, nope]` and `attn_v_b` `[N, v, R]`:
        per head its k rows (k_b transposed back) then its v rows, as HF stores it."""
        (v_name,) = entry.parts
        v_tensor = self._tensors[v_name]
        n, r, nope = entry.gguf_shape
        v_b = self._dequantized(replace(entry, gguf=v_name), v_tensor, self._data(v_tensor)).reshape(n, -1, r)
        kv = np.concatenate([k_b.reshape(n, r, nope).transpose(0, 2, 1), v_b], axis=1)
        return np.ascontiguousarray(kv.reshape(entry.canonical_shape), dtype=np.float32)

    def _regroup(self, value: np.ndarray, transform: Transform) -> np.ndarray:
        if transform in (Transform.ROPE_ROWS_PER_HEAD, Transform.ROPE_ROWS_LAST):
            return value[rope_row_order(self._layout.arch, transform, value.shape[0])]
        n_k, n_v, key_dim = self._layout.heads
        if transform in (Transform.BETA_ROWS, Transform.ALPHA_ROWS):  # qwen3next's ssm_ba: [Hk, b | a, r] rows
            lin = self._layout.arch.linear_attention
            assert lin is not None
            half = int(transform is Transform.ALPHA_ROWS)
            return value.reshape(lin.num_key_heads, 2, -1, *value.shape[1:])[:, half].reshape(-1, *value.shape[1:])
        if transform is Transform.VALUE_ROWS:
            return _regroup_value_heads(value, 0, 0, n_k, n_v)
        if transform is Transform.VALUE_COLUMNS:
            return _regroup_value_heads(value, 1, 0, n_k, n_v)
        # in_proj_qkv rows and conv channels are [q_all | k_all | v_all]
        return _regroup_value_heads(value, 0, 2 * key_dim, n_k, n_v)

    def read_experts(self, name: str, start: int, stop: int, *, as_float: bool) -> Weight:
        """Experts `start:stop` of an expert stack `[E, N, K]` (`*_exps`), only their bytes read: `read`'s
        value for them (a `QuantizedTensor` of their `(stop - start) * N` rows for a carried block form)
        or, with `as_float`, `read_float`'s. The stack's rows are its experts' rows one after the other, and
        every conversion (block forms, gguf-py's dequantization) works row by row, so the bytes are those
        of the whole stack's read sliced."""
        entry = self._entry(name)
        tensor = self._tensors[entry.gguf]
        e, n, k = entry.canonical_shape
        if entry.transform is not Transform.NONE or entry.gguf_shape != entry.canonical_shape:
            whole = self.read_float(name) if as_float else self.read(name)
            return whole.rows(start * n, stop * n) if isinstance(whole, QuantizedTensor) else whole[start:stop]
        if not as_float:
            rows = self._quantized_rows(name)
            if rows is not None:
                return rows.assembled(start * n, stop * n)
        raw = self._data(tensor).reshape(e * n, -1)[start * n : stop * n]
        value = self._dequantized(entry, tensor, raw).reshape(stop - start, n, k).astype(np.float32, copy=False)
        # An array of its own (F32 stacks are views of the map): the source's pages may go once it is made.
        return value.copy() if np.may_share_memory(value, raw) else value

    def release_experts(self, name: str, start: int, stop: int) -> None:
        """Drop the pages of experts `start:stop` of a stack this process has touched."""
        if self._header is None:
            return
        tensor = self._tensors[self._entry(name).gguf]
        per = tensor.nbytes // max(1, tensor.shape[0])
        self._header.release(replace(tensor, offset=tensor.offset + start * per, nbytes=(stop - start) * per))

    def release(self, name: str) -> None:
        """Drop the pages of `name` this process has touched (they stay in the page cache)."""
        if self._header is not None:
            entry = self._entry(name)
            for gguf_name in (entry.gguf, *entry.parts):
                self._header.release(self._tensors[gguf_name])

    def _data(self, tensor: GGUFTensorInfo) -> np.ndarray:
        if self._header is None:
            raise ValueError(f"{self._path}: the weight store is closed")
        return self._header.data(tensor)

    def close(self) -> None:
        self._header = None
        self._tensors = {}
