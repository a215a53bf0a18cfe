"""The MTP head's own LM head, `mtp.lm_head.weight`: rows of `lm_head.weight`, served by a store wrapper.

No checkpoint holds it: it is the main model's LM head (all of it, or the rows of a draft
vocabulary), which the head reads as a weight of its own so a quantization rule can store it apart
from the main model's copy. `WithOwnLmHead` serves it beside the wrapped store's weights, in the
source's encoding (a GGUF's blocks stay blocks), reading the source's rows a slab at a time so a
248k-row LM head is never whole in memory.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..util.lazy_import import lazy_module
from .store import QuantizedRows, QuantizedTensor, TensorInfo, Weight, WeightStore

np = lazy_module("numpy")  # lowering and the passes read only the names here; numpy when a weight is read

OWN_LM_HEAD = "mtp.lm_head.weight"
SOURCE = "lm_head.weight"
# Source rows read at a time while the selected ones are gathered.
_SLAB_ROWS = 4096


class WithOwnLmHead:
    """`store` plus `mtp.lm_head.weight`: the rows `ids` (ascending) of its `lm_head.weight`, or all of them;
    `from_head`: of the head's own LM head the checkpoint stores as `mtp.lm_head.weight` (Step-3.5's)."""

    def __init__(self, store: WeightStore, ids: Sequence[int] | None = None, *, from_head: bool = False):
        self._store = store
        self._ids = None if ids is None else np.asarray(ids, np.int64)
        self._source = OWN_LM_HEAD if from_head else SOURCE

    def names(self) -> Iterable[str]:
        return sorted({*self._store.names(), OWN_LM_HEAD})

    def info(self, name: str) -> TensorInfo:
        info = self._store.info(self._source if name == OWN_LM_HEAD else name)
        if name != OWN_LM_HEAD:
            return info
        rows = info.shape[0] if self._ids is None else len(self._ids)
        return TensorInfo(name, (rows, *info.shape[1:]), info.dtype, info.quantized, info.bits, info.block_size,
                          info.has_zero_points, info.float_zero_points, info.block_offsets)

    def read(self, name: str) -> Weight:
        if name != OWN_LM_HEAD:
            return self._store.read(name)
        return self._selected(self._store.read(self._source))

    def read_rows(self, name: str):
        read_rows = getattr(self._store, "read_rows", None)
        if name != OWN_LM_HEAD:
            return read_rows(name) if read_rows is not None else self._store.read(name)
        return self._selected(read_rows(self._source) if read_rows is not None else self._store.read(self._source))

    def read_float(self, name: str):
        if name != OWN_LM_HEAD:
            return self._store.read_float(name)
        value = self.read(name)
        return value.dequantize() if isinstance(value, QuantizedTensor) else np.asarray(value, np.float32)

    def read_float_rows(self, name: str):
        from ..util.arrays import Bfloat16Rows

        read = getattr(self._store, "read_float_rows", None)
        if name != OWN_LM_HEAD:
            return read(name) if read is not None else self._store.read_float(name)
        rows = self.read_rows(name)
        return rows if isinstance(rows, Bfloat16Rows) else self.read_float(name)

    def release(self, name: str) -> None:
        release = getattr(self._store, "release", None)
        if release is not None:
            release(self._source if name == OWN_LM_HEAD else name)

    def __getattr__(self, attr: str):
        return getattr(self._store, attr)  # what a source's store offers beyond the interface (experts, ...)

    def close(self) -> None:
        self._store.close()

    def _selected(self, weight):
        if self._ids is None:
            return weight
        return select_rows(weight, self._ids)


def select_rows(weight, ids: "np.ndarray"):
    """Rows `ids` (ascending) of a `[N, K]` weight, in its own encoding: a `QuantizedTensor` for block
    forms, raw bfloat16 as `Bfloat16Rows`, else an ndarray. Reads the source a slab of rows at a time."""
    from ..util.arrays import Bfloat16Rows

    if isinstance(weight, QuantizedTensor):
        return _taken(weight, ids)
    if isinstance(weight, QuantizedRows):
        parts = [_taken(weight.chunk(start, start + _SLAB_ROWS), chosen - start) for start, chosen in _slabs(ids)]
        first = parts[0]
        return QuantizedTensor(
            first.bits, first.block_size, (len(ids), first.shape[1]), np.concatenate([p.data for p in parts]),
            np.concatenate([p.scales for p in parts]),
            None if first.zero_points is None else np.concatenate([p.zero_points for p in parts]),
            first.source_type, None if first.block_offsets is None else np.concatenate([p.block_offsets for p in parts]),
        )
    if isinstance(weight, Bfloat16Rows):
        return Bfloat16Rows(np.concatenate([weight.bits[start:start + _SLAB_ROWS][chosen - start]
                                            for start, chosen in _slabs(ids)]))
    return np.concatenate([np.asarray(weight[start:start + _SLAB_ROWS])[chosen - start] for start, chosen in _slabs(ids)])


def _slabs(ids: "np.ndarray"):
    """(first row of a slab, the ids inside it) for every slab holding a selected row."""
    starts = (ids // _SLAB_ROWS) * _SLAB_ROWS
    for start in np.unique(starts):
        yield int(start), ids[starts == start]


def _taken(q: QuantizedTensor, rows: "np.ndarray") -> QuantizedTensor:
    return QuantizedTensor(
        q.bits, q.block_size, (len(rows), q.shape[1]), q.data[rows], q.scales[rows],
        None if q.zero_points is None else q.zero_points[rows], q.source_type,
        None if q.block_offsets is None else q.block_offsets[rows],
    )
