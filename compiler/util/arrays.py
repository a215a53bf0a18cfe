"""Array copies at the speed of memory: bfloat16 widening and transposes, written into their output.

A compile moves every weight once: read from the memory-mapped checkpoint, maybe widened
from bfloat16 and transposed into MatMul's `[K, N]`, then written. numpy's one-liners for
these make temporaries (`(bits.astype(uint32) << 16)` makes two, each as large as the
float32 result) and `np.ascontiguousarray(w.T)` walks one side of a large matrix a column
at a time, missing the cache on every element. Here each output is allocated once and filled
in tiles small enough to stay in cache.

Every function gives exactly the bytes of the plain numpy expression it replaces
(tests/util/test_arrays.py holds them to that).
"""

from __future__ import annotations

import numpy as np

# Rows of the source per transposed tile (measured best of 32..512 on x86-64): the tile is read
# sequentially and written as 512-byte runs into each output row, so both sides stream through the cache.
_TILE_ROWS = 128
# Elements per tile of a narrow transposed slab (`transposed_slab`).
_TILE_ELEMENTS = 1 << 14
# Rows widened at a time when only widening (no transpose): a few MB, whatever the tensor.
_WIDEN_ELEMENTS = 1 << 20
# Which uint16 half of a float32 is its low (zeroed) half and which its high one (the bfloat16 bits).
_LOW, _HIGH = (0, 1) if np.little_endian else (1, 0)


def widen_bfloat16(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 values of raw bfloat16 bits (uint16): each is the upper half of its float32, exactly.

    Written straight into `out` (or a new array): the low halves are zeroed and the high halves
    copied, with no temporary the size of the tensor.
    """
    if out is None:
        out = np.empty(bits.shape, np.float32)
    flat_bits = bits.reshape(-1)
    flat = out.reshape(-1).view(np.uint16).reshape(-1, 2)  # views: `out` is contiguous
    step = _WIDEN_ELEMENTS
    for start in range(0, flat.shape[0], step):
        flat[start : start + step, _LOW] = 0
        flat[start : start + step, _HIGH] = flat_bits[start : start + step]
    return out


class Bfloat16Rows:
    """A `[N, K]` bfloat16 matrix that widens to float32 only the rows asked for (`w[a:b]`).

    Quantizing reads a weight a few rows at a time; over this it never holds the whole float32
    copy (5 GB for a 27B model's LM head), only the rows of the chunk at hand.
    """

    dtype = np.dtype(np.float32)

    def __init__(self, bits: np.ndarray):
        self.bits = bits
        self.shape = bits.shape
        self.ndim = bits.ndim

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows) -> np.ndarray:
        return widen_bfloat16(self.bits[rows])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        full = widen_bfloat16(self.bits)
        return full if dtype is None else full.astype(dtype, copy=False)


def transposed(w: np.ndarray | Bfloat16Rows, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """`np.ascontiguousarray(np.asarray(w).T.astype(dtype))` for a 2-D `w`, tile by tile into one output.

    A `Bfloat16Rows` is widened tile by tile on the way (its float32 copy never exists whole).
    """
    dtype = np.dtype(dtype)
    n, k = w.shape
    out = np.empty((k, n), dtype)
    if isinstance(w, Bfloat16Rows) and dtype == np.float32:
        halves = out.view(np.uint16).reshape(k, n, 2)
        for start in range(0, n, _TILE_ROWS):
            stop = min(start + _TILE_ROWS, n)
            halves[:, start:stop, _LOW] = 0
            halves[:, start:stop, _HIGH] = w.bits[start:stop].T
        return out
    for start in range(0, n, _TILE_ROWS):
        stop = min(start + _TILE_ROWS, n)
        out[:, start:stop] = w[start:stop].T  # the cast, if any, happens in this copy
    return out


def slab_rows(n: int, dtype: np.dtype | type, chunk_bytes: int) -> int:
    """Rows of a `[K, n]` output per slab of about `chunk_bytes`."""
    return max(1, chunk_bytes // max(1, n * np.dtype(dtype).itemsize))


def transposed_chunks(w: np.ndarray | Bfloat16Rows, dtype: np.dtype | type, rows: int):
    """`transposed(w, dtype)` as consecutive slabs of `rows` of its rows, for a writer that streams
    them: only one slab exists at a time, never the whole `[K, N]` output."""
    for k0 in range(0, w.shape[1], rows):
        yield transposed_slab(w, dtype, k0, min(k0 + rows, w.shape[1]))


def transposed_slab(w: np.ndarray | Bfloat16Rows, dtype: np.dtype | type, k0: int, k1: int) -> np.ndarray:
    """Rows `k0:k1` of `transposed(w, dtype)`, i.e. `w[:, k0:k1].T`, filled tile by tile as `transposed`
    fills the whole, so slabs joined are its bytes."""
    dtype = np.dtype(dtype)
    n = w.shape[0]
    out = np.empty((k1 - k0, n), dtype)
    # A plain view (a memmap's slices cost a Python object each); tiles of about _TILE_ELEMENTS, taller
    # for a narrow slab, so each tile still reads and writes whole cache lines.
    source = np.asarray(w.bits if isinstance(w, Bfloat16Rows) else w)
    tile = max(_TILE_ROWS, _TILE_ELEMENTS // max(1, k1 - k0))
    if isinstance(w, Bfloat16Rows) and dtype == np.float32:
        halves = out.view(np.uint16).reshape(k1 - k0, n, 2)
        for start in range(0, n, tile):
            stop = min(start + tile, n)
            halves[:, start:stop, _LOW] = 0
            halves[:, start:stop, _HIGH] = source[start:stop, k0:k1].T
        return out
    for start in range(0, n, tile):
        stop = min(start + tile, n)
        block = source[start:stop, k0:k1]
        if isinstance(w, Bfloat16Rows):
            block = widen_bfloat16(np.ascontiguousarray(block))
        out[:, start:stop] = block.T  # the cast, if any, happens in this copy
    return out


def can_slice_columns(w) -> bool:
    """Whether `transposed_chunks` can read `w` a slab of columns at a time (arrays and `Bfloat16Rows`;
    a weight that dequantizes only by whole rows cannot)."""
    return isinstance(w, (np.ndarray, Bfloat16Rows))
