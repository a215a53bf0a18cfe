"""Initializers whose bytes exist only while the data file is being streamed.

A graph is built against *planned* tensors: name, dtype and shape are known up
front (so the `.onnx` proto can carry external-data references with exact
offsets), while the values are produced one source weight at a time when the
`.onnx.data` file is written. Memory therefore stays bounded by the largest
single weight, whatever the model size.
"""

from __future__ import annotations

import posixpath
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

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
        """The file's bytes, produced one group at a time; with `jobs` > 1, that many groups are
        produced ahead in threads while the one before them is written (numpy's copies, casts and
        quantization arithmetic release the GIL). The bytes are the same for any `jobs`: every group
        is produced by the same function and they are written in registration order."""
        written = 0
        for group, arrays in zip(self.groups, _produced(self.groups, jobs)):
            if len(arrays) != len(group.tensors):
                raise AssertionError(f"{group.tensors[0].name}: produced {len(arrays)} arrays")
            for tensor, array in zip(group.tensors, arrays):
                data = _tensor_bytes(tensor, array)
                offset = self.placements[tensor.name].offset
                if offset > written:
                    yield b"\0" * (offset - written)
                yield data
                written = offset + len(data)

    def layout(self) -> dict[str, StoredTensor]:
        """Every tensor in the file, by name."""
        out = {}
        for group in self.groups:
            for t in group.tensors:
                p = self.placements[t.name]
                out[t.name] = StoredTensor(p.offset, p.length, int(t.dtype), t.shape)
        return out


def _produced(groups: Iterable[InitializerGroup], jobs: int) -> Iterator[tuple[np.ndarray, ...]]:
    """Each group's arrays, in order; at most `jobs` produced ahead of the one being consumed."""
    if jobs <= 1:
        for group in groups:
            yield group.produce()
        return
    pending: deque = deque()
    queued = iter(groups)
    with ThreadPoolExecutor(jobs, thread_name_prefix="mtpc-data") as pool:
        try:
            for group in queued:
                pending.append(pool.submit(group.produce))
                if len(pending) == jobs:
                    break
            while pending:
                arrays = pending.popleft().result()
                following = next(queued, None)
                if following is not None:
                    pending.append(pool.submit(following.produce))
                yield arrays
                del arrays  # written: let it go before the next one is waited for
        finally:  # the writer stopped early (an error, an interrupt): start nothing more
            for future in pending:
                future.cancel()


def _tensor_bytes(tensor: PlannedTensor, array: np.ndarray) -> memoryview:
    array = np.asarray(array)
    if tuple(array.shape) != tensor.shape:
        raise AssertionError(f"initializer {tensor.name!r}: planned shape {tensor.shape}, produced {array.shape}")
    # A view of the array's own buffer rather than a bytes copy: the largest tensor is held once, not twice.
    # Viewed as bytes first: ml_dtypes' bfloat16 arrays do not export a buffer of their own type.
    stored = np.ascontiguousarray(array.astype(tensor.dtype.numpy().newbyteorder("<"), copy=False))
    data = memoryview(stored.reshape(-1).view(np.uint8))
    if len(data) != tensor.nbytes:
        raise AssertionError(f"initializer {tensor.name!r}: planned {tensor.nbytes} bytes, produced {len(data)}")
    return data
