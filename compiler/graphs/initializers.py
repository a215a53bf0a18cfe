"""Initializers whose bytes exist only while the data file is being streamed.

A graph is built against *planned* tensors: name, dtype and shape are known up
front (so the `.onnx` proto can carry external-data references with exact
offsets), while the values are produced one source weight at a time when the
`.onnx.data` file is written, a large weight one slab at a time (`InitializerGroup.pieces`).
Memory therefore stays bounded by a few slabs (`--jobs` of them in flight) plus the small
tensors of the weight being written, whatever the model size.
"""

from __future__ import annotations

import posixpath
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import onnx_ir as oir

# Big tensors start on a 64 KiB boundary (the allocation granularity onnx itself uses
# when it externalizes data) so runtimes can memory-map them; small ones on 64 bytes.
LARGE_TENSOR_BYTES = 1 << 20
LARGE_ALIGNMENT = 1 << 16
SMALL_ALIGNMENT = 64


@dataclass(frozen=True)
class PlannedTensor:
    name: str
    dtype: oir.DataType
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.numpy().itemsize


@dataclass(frozen=True)
class InitializerGroup:
    """Initializers made together from one source weight (a quantized weight gives data, scales, zero points).

    `produce` returns one array per planned tensor, in order; it runs only when
    the data file is streamed.
    """

    tensors: tuple[PlannedTensor, ...]
    produce: Callable[[], tuple[np.ndarray, ...]]
    # The same arrays in slabs, for a large weight: a callable per slab, in order, each making one slab
    # per tensor (slab j runs along axis `axes[j]` of tensor j, 0 unless given; consecutive slabs are
    # consecutive). Each callable works alone, so slabs of one weight are made in parallel (`--jobs`).
    # The data file writes the first tensor's slabs as they come and assembles the others (a fraction of
    # it: scales, zero points), so a weight is never whole in memory. None: `produce` only.
    pieces: Callable[[], Sequence[Callable[[], tuple[np.ndarray, ...]]]] | None = None
    axes: tuple[int, ...] | None = None
    # Called once the group's bytes are written (a store lets the weight's source pages go).
    written: Callable[[], None] | None = None

    def work(self) -> Sequence[Callable[[], tuple[np.ndarray, ...]]]:
        """What makes the group's bytes: its pieces, or `produce` as the one piece."""
        pieces = self.pieces() if self.pieces is not None else ()
        return pieces or (self.produce,)


@dataclass(frozen=True)
class Placement:
    """Where one initializer lives in its data file."""

    offset: int
    length: int


@dataclass(frozen=True)
class StoredTensor:
    """One initializer as its data file holds it."""

    offset: int
    length: int
    data_type: int  # onnx TensorProto data type
    shape: tuple[int, ...]


def aligned(offset: int, nbytes: int) -> int:
    alignment = LARGE_ALIGNMENT if nbytes >= LARGE_TENSOR_BYTES else SMALL_ALIGNMENT
    return -(-offset // alignment) * alignment


class DataFile:
    """The layout of one `.onnx.data` file: groups in registration order, each tensor aligned.

    One file may serve several graphs (the MTP head's holds the embedding and LM head the main
    model reads too); each graph names it relative to its own folder.
    """

    def __init__(self, relpath: str):
        self.relpath = relpath  # inside the package
        self.groups: list[InitializerGroup] = []
        self.placements: dict[str, Placement] = {}
        self.size = 0
        self._planned: dict[str, tuple[PlannedTensor, ...]] = {}  # first tensor's name -> the group's tensors

    def holds(self, group: InitializerGroup) -> bool:
        """Whether a group with exactly these tensors (names, dtypes, shapes) is already in the file.

        Names encode the weight and its stored form, so such a group holds the same bytes.
        """
        return self._planned.get(group.tensors[0].name) == group.tensors

    def add(self, group: InitializerGroup) -> None:
        for tensor in group.tensors:
            if tensor.name in self.placements:
                raise AssertionError(f"initializer {tensor.name!r} planned twice")
            offset = aligned(self.size, tensor.nbytes)
            placement = Placement(offset, tensor.nbytes)
            self.placements[tensor.name] = placement
            self.size = offset + tensor.nbytes
        self.groups.append(group)
        self._planned[group.tensors[0].name] = group.tensors

    def location_from(self, graph_relpath: str) -> str:
        """This file as the graph at `graph_relpath` names it: relative to the graph's folder, never
        through '..' (onnxruntime refuses external data outside the model's folder)."""
        location = posixpath.relpath(self.relpath, posixpath.dirname(graph_relpath) or ".")
        if location.startswith("../"):
            raise AssertionError(f"{graph_relpath} cannot reach {self.relpath}: onnxruntime refuses '..' locations")
        return location

    def external_tensor(self, tensor: PlannedTensor, location: str) -> oir.ExternalTensor:
        p = self.placements[tensor.name]
        return oir.ExternalTensor(
            location, p.offset, p.length, tensor.dtype, shape=oir.Shape(tensor.shape), name=tensor.name
        )

    def chunks(self, jobs: int = 1) -> Iterator[bytes | memoryview]:
        """The file's bytes, produced one group (or one slab of a large weight) at a time; with `jobs` > 1,
        that many pieces are produced ahead in threads while the one before them is written (numpy's
        copies, casts and quantization arithmetic release the GIL). The bytes are the same for any
        `jobs`: every piece is produced by the same function and they are written in registration order."""
        written = 0
        for tensor, data in _file_pieces(self.groups, jobs):
            offset = self.placements[tensor.name].offset
            if offset > written:
                yield b"\0" * (offset - written)
                written = offset
            yield data
            written += len(data)

    def layout(self) -> dict[str, StoredTensor]:
        """Every tensor in the file, by name."""
        out = {}
        for group in self.groups:
            for t in group.tensors:
                p = self.placements[t.name]
                out[t.name] = StoredTensor(p.offset, p.length, int(t.dtype), t.shape)
        return out


def _file_pieces(groups: Sequence[InitializerGroup], jobs: int) -> Iterator[tuple[PlannedTensor, memoryview]]:
    """(tensor, bytes) of every group in file order."""
    current: _Assembly | None = None
    for index, arrays in _produced(groups, jobs):
        if current is None or current.index != index:
            if current is not None:
                yield from current.finish()
            current = _Assembly(index, groups[index])
        yield from current.add(arrays)
    if current is not None:
        yield from current.finish()


class _Assembly:
    """One group's bytes in file order: the first tensor's slabs as they come (when they run along its
    axis 0), then each other tensor assembled from its slabs."""

    def __init__(self, index: int, group: InitializerGroup):
        self.index, self.group = index, group
        tensors = group.tensors
        self.axes = group.axes or (0,) * len(tensors)
        self.held: list[np.ndarray | None] = [None] * len(tensors)
        self.filled = [0] * len(tensors)
        self.streamed = self.axes[0] == 0

    def add(self, arrays: tuple) -> Iterator[tuple[PlannedTensor, memoryview]]:
        tensors = self.group.tensors
        if len(arrays) != len(tensors):
            raise AssertionError(f"{tensors[0].name}: produced {len(arrays)} arrays")
        for j, (tensor, array) in enumerate(zip(tensors, arrays)):
            array = np.asarray(array)
            if j == 0 and self.streamed:
                yield tensor, _slab_bytes(tensor, array, self.filled[0])
                self.filled[0] += array.shape[0] if array.ndim else 1
            else:
                self.held[j], self.filled[j] = _hold(tensor, array, self.axes[j], self.held[j], self.filled[j])

    def finish(self) -> Iterator[tuple[PlannedTensor, memoryview]]:
        tensors = self.group.tensors
        if self.streamed and self.filled[0] != (tensors[0].shape[0] if tensors[0].shape else 1):
            raise AssertionError(
                f"initializer {tensors[0].name!r}: planned shape {tensors[0].shape}, produced {self.filled[0]} rows")
        for j, tensor in enumerate(tensors):
            if j == 0 and self.streamed:
                continue
            if self.held[j] is None:
                raise AssertionError(f"initializer {tensor.name!r}: nothing produced")
            yield tensor, _tensor_bytes(tensor, self.held[j])
            self.held[j] = None  # written: let it go
        if self.group.written is not None:
            self.group.written()


def _hold(tensor: PlannedTensor, array: np.ndarray, axis: int, held: np.ndarray | None, filled: int):
    """Put one slab of `tensor` in place; an array that is the whole tensor is kept as it is."""
    if held is None and filled == 0 and tuple(array.shape) == tensor.shape:
        return array, tensor.shape[axis] if tensor.shape else 1
    if held is None:
        held = np.empty(tensor.shape, array.dtype)
    count = array.shape[axis]
    index = [slice(None)] * len(tensor.shape)
    index[axis] = slice(filled, filled + count)
    if filled + count > tensor.shape[axis] or tuple(np.delete(array.shape, axis)) != tuple(np.delete(tensor.shape, axis)):
        raise AssertionError(f"initializer {tensor.name!r}: planned shape {tensor.shape}, produced a slab {array.shape}")
    held[tuple(index)] = array
    return held, filled + count


def _slab_bytes(tensor: PlannedTensor, array: np.ndarray, filled: int) -> memoryview:
    """Rows `filled:` of `tensor` as stored, from a slab along its axis 0."""
    if array.ndim != len(tensor.shape) or tuple(array.shape[1:]) != tensor.shape[1:] or \
            filled + array.shape[0] > tensor.shape[0]:
        raise AssertionError(f"initializer {tensor.name!r}: planned shape {tensor.shape}, produced a slab {array.shape}")
    return _stored_view(tensor, array)


def _work(groups: Sequence[InitializerGroup]) -> Iterator[tuple[int, Callable[[], tuple]]]:
    for index, group in enumerate(groups):
        for piece in group.work():
            yield index, piece


def _produced(groups: Sequence[InitializerGroup], jobs: int) -> Iterator[tuple[int, tuple]]:
    """(group index, arrays) of every piece of every group, in order; at most `jobs` pieces produced
    ahead of the one being consumed."""
    if jobs <= 1:
        for index, piece in _work(groups):
            yield index, piece()
        return
    pending: deque = deque()
    queued = _work(groups)
    with ThreadPoolExecutor(jobs, thread_name_prefix="mtpc-data") as pool:
        try:
            for index, piece in queued:
                pending.append((index, pool.submit(piece)))
                if len(pending) == jobs:
                    break
            while pending:
                index, future = pending.popleft()
                following = next(queued, None)
                if following is not None:
                    pending.append((following[0], pool.submit(following[1])))
                arrays = future.result()
                del future
                yield index, arrays
                del arrays  # written: let it go before the next one is waited for
        finally:  # the writer stopped early (an error, an interrupt): start nothing more
            for _, future in pending:
                future.cancel()


def _tensor_bytes(tensor: PlannedTensor, array: np.ndarray) -> memoryview:
    array = np.asarray(array)
    if tuple(array.shape) != tensor.shape:
        raise AssertionError(f"initializer {tensor.name!r}: planned shape {tensor.shape}, produced {array.shape}")
    data = _stored_view(tensor, array)
    if len(data) != tensor.nbytes:
        raise AssertionError(f"initializer {tensor.name!r}: planned {tensor.nbytes} bytes, produced {len(data)}")
    return data


def _stored_view(tensor: PlannedTensor, array: np.ndarray) -> memoryview:
    # A view of the array's own buffer rather than a bytes copy: the largest tensor is held once, not twice.
    # Viewed as bytes first: ml_dtypes' bfloat16 arrays do not export a buffer of their own type.
    stored = np.ascontiguousarray(array.astype(tensor.dtype.numpy().newbyteorder("<"), copy=False))
    return memoryview(stored.reshape(-1).view(np.uint8))
