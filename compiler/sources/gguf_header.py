"""A fast reader of a GGUF file's header: key/value metadata and tensor infos.

gguf-py's GGUFReader builds a numpy view per array element while it opens a
file, which takes seconds for a real vocabulary (a 150k-token list costs about
5 s). `describe()` and `mtpc inspect` only need the header, so this reader
walks it with `struct` over a memory map and leaves string arrays undecoded
until someone iterates them. Tensor data is never touched; its extent is
checked against the file size so a truncated file is reported as such.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import quant_shape_to_byte_shape

from ..diagnostics import SourceError

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# GGUF value type -> struct format of one scalar
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}  # fmt: skip


class _Truncated(Exception):
    pass


class LazyStrings(Sequence[str]):
    """A GGUF string array, decoded on access (a vocabulary has ~250k of them)."""

    def __init__(self, buf: memoryview, offsets: np.ndarray, lengths: np.ndarray):
        self._buf, self._offsets, self._lengths = buf, offsets, lengths

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        start = int(self._offsets[index])
        return bytes(self._buf[start : start + int(self._lengths[index])]).decode("utf-8", errors="replace")

    def __iter__(self) -> Iterator[str]:
        buf = self._buf
        for start, length in zip(self._offsets.tolist(), self._lengths.tolist()):
            yield bytes(buf[start : start + length]).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ne: tuple[int, ...]  # ggml order: innermost dimension first
    type: GGMLQuantizationType
    offset: int  # absolute offset of the data in the file
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order."""
        return tuple(reversed(self.ne))


class GGUFHeader:
    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            raise SourceError(f"{path}: not a GGUF file (empty)") from None
        self._buf = memoryview(self._map)
        try:
            self._parse()
        except _Truncated:
            raise SourceError(f"{path}: truncated GGUF file (the header ends early)") from None

    # -- the walk ---------------------------------------------------------------------------
    def _take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self._pos + size > len(self._buf):
            raise _Truncated
        values = struct.unpack_from(fmt, self._buf, self._pos)
        self._pos += size
        return values

    def _string(self) -> str:
        (length,) = self._take("<Q")
        end = self._pos + length
        if end > len(self._buf):
            raise _Truncated
        text = bytes(self._buf[self._pos : end]).decode("utf-8", errors="replace")
        self._pos = end
        return text

    def _value(self, kind: int):
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            element, count = self._take("<IQ")
            return self._array(element, count)
        fmt = _SCALARS.get(kind)
        if fmt is None:
            raise SourceError(f"{self.path}: unknown GGUF metadata value type {kind}")
        return self._take("<" + fmt)[0]

    def _array(self, element: int, count: int):
        if element == _STRING:
            offsets = np.empty(count, np.int64)
            lengths = np.empty(count, np.int64)
            buf, pos, end = self._buf, self._pos, len(self._buf)
            for i in range(count):
                if pos + 8 > end:
                    raise _Truncated
                length = int.from_bytes(buf[pos : pos + 8], "little")
                offsets[i], lengths[i] = pos + 8, length
                pos += 8 + length
            if pos > end:
                raise _Truncated
            self._pos = pos
            return LazyStrings(buf, offsets, lengths)
        if element in _NUMPY:
            dtype = np.dtype(_NUMPY[element]).newbyteorder("<")
            size = dtype.itemsize * count
            if self._pos + size > len(self._buf):
                raise _Truncated
            values = np.frombuffer(self._buf, dtype, count, self._pos).tolist()
            self._pos += size
            return values
        return [self._value(element) for _ in range(count)]  # arrays of arrays

    def _parse(self) -> None:
        self._pos = 0
        (magic,) = self._take("<4s")
        if magic != _MAGIC:
            raise SourceError(f"{self.path}: not a GGUF file (magic {magic!r})")
        version, n_tensors, n_kv = self._take("<IQQ")
        if version < 2:
            raise SourceError(f"{self.path}: GGUF version {version} is too old (mtpc reads versions 2 and 3)")
        self.metadata: dict[str, object] = {"GGUF.version": version, "GGUF.tensor_count": n_tensors}
        for _ in range(n_kv):
            key = self._string()
            (kind,) = self._take("<I")
            self.metadata[key] = self._value(kind)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._take("<I")
            ne = self._take(f"<{n_dims}Q")
            kind, offset = self._take("<IQ")
            infos.append((name, ne, kind, offset))
        alignment = int(self.metadata.get("general.alignment", 32))
        data_start = -(-self._pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, ne, kind, offset in infos:
            try:
                qtype = GGMLQuantizationType(kind)
            except ValueError:
                raise SourceError(f"{self.path}: GGUF tensor {name} has unknown type {kind}") from None
            block, type_size = GGML_QUANT_SIZES[qtype]
            elements = int(np.prod(ne, dtype=np.int64)) if ne else 1
            info = TensorInfo(name, tuple(int(d) for d in ne), qtype, data_start + offset, elements // block * type_size)
            if info.offset + info.nbytes > len(self._buf):
                raise SourceError(
                    f"{self.path}: truncated GGUF file: tensor {name} ends at byte {info.offset + info.nbytes}, "
                    f"the file has {len(self._buf)}"
                )
            self.tensors[name] = info

    # -- tensor data --------------------------------------------------------------------------
    def data(self, info: TensorInfo) -> np.ndarray:
        """A read-only view of a tensor's bytes, shaped as gguf-py shapes it.

        Float and integer types come as their numpy dtype in numpy dimension order;
        block-quantized types (and BF16) as uint8 with the innermost dimension in bytes,
        which is what `gguf.quants.dequantize` takes.
        """
        dtype = _PLAIN_TYPES.get(info.type)
        if dtype is not None:
            count = int(np.prod(info.ne, dtype=np.int64))
            return np.frombuffer(self._buf, dtype, count, info.offset).reshape(info.shape)
        shape = quant_shape_to_byte_shape(info.shape, info.type)
        return np.frombuffer(self._buf, np.uint8, info.nbytes, info.offset).reshape(shape)


_PLAIN_TYPES = {
    GGMLQuantizationType.F32: np.dtype("<f4"),
    GGMLQuantizationType.F16: np.dtype("<f2"),
    GGMLQuantizationType.F64: np.dtype("<f8"),
    GGMLQuantizationType.I8: np.dtype("i1"),
    GGMLQuantizationType.I16: np.dtype("<i2"),
    GGMLQuantizationType.I32: np.dtype("<i4"),
    GGMLQuantizationType.I64: np.dtype("<i8"),
}
