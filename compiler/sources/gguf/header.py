"""A fast reader of a GGUF file's header: key/value metadata and tensor infos.

gguf-py's GGUFReader builds a numpy view per array element while it opens a
file, which takes seconds for a real vocabulary (a 150k-token list costs about
5 s). `describe()` and `mtpc inspect` only need the header, so this reader
walks it with `struct` over a memory map, without numpy or gguf-py (their
imports alone cost the metadata verbs a fifth of a second; the type tables come
from `constants`). A string array (the vocabulary and its merges, half a
million strings in a 248k-token file) is stepped over, not read: only where it
ends is needed to reach the tensor infos, and its strings are found and decoded
when someone reads them (compile, writing tokenizer.json). Tensor data is never
touched; its extent is checked against the file size so a truncated file is
reported as such.
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Iterator, Sequence

from ...util.diagnostics import SourceError
from .constants import GGML_QUANT_SIZES, GGMLQuantizationType

if TYPE_CHECKING:
    import numpy as np

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# GGUF value type -> struct format of one scalar
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


_VERSIONS = (2, 3)
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 4  # arrays of arrays: llama.cpp writes none; a bound keeps a hostile header from recursing
_INTEGER_TYPES = frozenset((0, 1, 2, 3, 4, 5, 10, 11))
_U64 = struct.Struct("<Q")


class _Truncated(Exception):
    pass


class NeedMore(Exception):
    """A header read from the first bytes of its file (`prefix`, a hub range request) goes on past them."""


class LazyStrings(Sequence[str]):
    """A GGUF string array, found and decoded on access (a vocabulary has ~250k of them).

    The header walk only learns where the array starts and ends (`skip_strings`); where each
    string lies is worked out the first time one is read.
    """

    def __init__(self, buf: memoryview, start: int, count: int):
        self._buf, self._start, self._count = buf, start, count
        self._index: tuple[list[int], list[int]] | None = None

    def __len__(self) -> int:
        return self._count

    def _located(self) -> tuple[list[int], list[int]]:
        if self._index is None:
            self._index = string_offsets(self._buf, self._start, self._count)
        return self._index

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        offsets, lengths = self._located()
        start = offsets[index]
        return bytes(self._buf[start : start + lengths[index]]).decode("utf-8", errors="replace")

    def __iter__(self) -> Iterator[str]:
        buf = self._buf
        offsets, lengths = self._located()
        for start, length in zip(offsets, lengths):
            yield bytes(buf[start : start + length]).decode("utf-8", errors="replace")


def skip_strings(buf: memoryview, start: int, count: int) -> int:
    """Where an array of `count` length-prefixed strings beginning at `start` ends (`_Truncated` past the file).

    Each string is a little-endian u64 length and that many bytes, so the end is found by stepping
    from length to length, and nothing else is done per string: half a million steps for a 248k-token
    vocabulary and its merges. Runs of `_RUN` strings shorter than 256 bytes (a vocabulary's strings,
    nearly all) are stepped over by one regular-expression match each (`_short_run`), in C, at about
    twice the speed of the Python loop; a run with a longer string, and the tail, are stepped in Python.
    """
    pos = start
    if count >= _REGEX_FROM:
        run = _short_run()
        while count >= _RUN:
            matched = run.match(buf, pos)
            if matched is None:  # a string of 256 bytes or more in this run (or the file ends): step it
                pos = _step(buf, pos, _RUN)
            else:
                pos = matched.end()
            count -= _RUN
    return _step(buf, pos, count)


def _step(buf: memoryview, pos: int, count: int) -> int:
    end = len(buf)
    unpack = _U64.unpack_from
    try:
        for _ in range(count):
            pos += 8 + unpack(buf, pos)[0]
    except (struct.error, OverflowError):  # a length prefix past the end of the file
        raise _Truncated from None
    if pos > end:  # the last string runs past the end (every earlier one is followed by a prefix)
        raise _Truncated
    return pos


_RUN = 1024
_REGEX_FROM = 16 * _RUN  # below this, compiling the expression (about 5 ms) costs more than it saves


@lru_cache(maxsize=1)
def _short_run() -> "re.Pattern[bytes]":
    """`_RUN` consecutive strings shorter than 256 bytes: a string of length L < 256 is the byte L, seven
    zero bytes (the rest of its u64 length) and L bytes of anything, one alternative per L (each starts
    with its own byte, so at most one applies at any place and the match is the stepping's own walk)."""
    one = b"|".join(re.escape(bytes([length]) + bytes(7)) + (b".{%d}" % length if length else b"") for length in range(256))
    return re.compile(b"(?s:(?:%s){%d})" % (one, _RUN))


def string_offsets(buf: memoryview, start: int, count: int) -> tuple[list[int], list[int]]:
    """(offset, length) of each string of an array `skip_strings` stepped over."""
    offsets, lengths = [0] * count, [0] * count
    pos = start
    unpack = _U64.unpack_from
    for i in range(count):
        (length,) = unpack(buf, pos)
        offsets[i], lengths[i] = pos + 8, length
        pos += 8 + length
    return offsets, lengths


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
    """The header of a GGUF file, validated before anything is allocated from it.

    Every count (metadata pairs, array elements, tensors, dimensions) is checked against
    the bytes left in the file before it sizes anything, every value type against the
    GGUF type table, and every tensor's data extent against the file: a damaged or
    hostile header is a `SourceError` naming the file and the field, never a MemoryError.
    """

    def __init__(self, path: str, *, prefix: bytes | None = None, file_size: int | None = None):
        """The file at `path`, memory-mapped; or, with `prefix` (its first bytes, read from the hub,
        `sources/hub/remote.py`) and `file_size`, a file not on this machine: every count and extent is
        checked against the file's size, and a header longer than `prefix` raises `NeedMore`."""
        self.path = path
        self._map: mmap.mmap | None = None
        if prefix is None:
            try:
                with open(path, "rb") as f:
                    self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file cannot be mapped
                raise SourceError(f"{path}: not a GGUF file (empty)") from None
            except OSError as e:
                raise SourceError(f"{path}: cannot read: {e.strerror}") from None
            self._buf = memoryview(self._map)
        else:
            self._buf = memoryview(prefix)
        self.file_size = len(self._buf) if file_size is None else file_size
        # key -> (GGUF value type, element type of an array or None), for typed reads (`metadata`)
        self.types: dict[str, tuple[int, int | None]] = {}
        self._field = "the header"
        try:
            self._parse()
        except _Truncated:
            if len(self._buf) < self.file_size:
                raise NeedMore from None
            raise SourceError(f"{path}: truncated GGUF file (the header ends early, in {self._field})") from None

    def _fail(self, problem: str) -> SourceError:
        return SourceError(f"{self.path}: {problem}")

    # -- the walk ---------------------------------------------------------------------------
    def _left(self) -> int:
        return self.file_size - self._pos

    def _take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self._pos + size > len(self._buf):
            raise _Truncated
        values = struct.unpack_from(fmt, self._buf, self._pos)
        self._pos += size
        return values

    def _count(self, count: int, min_size: int, what: str) -> None:
        """Refuse a declared count whose items cannot fit in the rest of the file (before allocating)."""
        if count * min_size > self._left():
            raise self._fail(
                f"truncated GGUF file (the header ends early): {what} declares {count} entries, more than the "
                f"{self._left()} bytes left in the file can hold"
            )

    def _string(self) -> str:
        (length,) = self._take("<Q")
        end = self._pos + length
        if end > len(self._buf):
            raise _Truncated
        text = bytes(self._buf[self._pos : end]).decode("utf-8", errors="replace")
        self._pos = end
        return text

    def _value(self, kind: int, depth: int = 0):
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            element, count = self._take("<IQ")
            return self._array(element, count, depth)
        fmt = _SCALARS.get(kind)
        if fmt is None:
            raise self._fail(f"{self._field} has unknown GGUF value type {kind}")
        return self._take("<" + fmt)[0]

    def _array(self, element: int, count: int, depth: int = 0):
        if element == _STRING:
            self._count(count, 8, f"{self._field} (an array of strings)")
            start = self._pos
            self._pos = skip_strings(self._buf, start, count)
            return LazyStrings(self._buf, start, count)
        fmt = _SCALARS.get(element)
        if fmt is not None:
            item = struct.calcsize("<" + fmt)
            self._count(count, item, f"{self._field} (an array)")
            if self._pos + item * count > len(self._buf):
                raise _Truncated
            values = list(struct.unpack_from(f"<{count}{fmt}", self._buf, self._pos))
            self._pos += item * count
            return values
        if element == _ARRAY:
            if depth >= _MAX_NESTING:
                raise self._fail(f"{self._field} nests arrays more than {_MAX_NESTING} deep")
            self._count(count, 12, f"{self._field} (an array of arrays)")
            return [self._value(element, depth + 1) for _ in range(count)]
        raise self._fail(f"{self._field} is an array of unknown GGUF value type {element}")

    def _parse(self) -> None:
        self._pos = 0
        (magic,) = self._take("<4s")
        if magic != _MAGIC:
            raise self._fail(f"not a GGUF file (magic {magic!r})")
        self._field = "the version"
        (version,) = self._take("<I")
        if version not in _VERSIONS:
            raise self._fail(f"GGUF version {version} is not supported (mtpc reads versions 2 and 3)")
        self._field = "the tensor and metadata counts"
        n_tensors, n_kv = self._take("<QQ")
        # the smallest key/value pair: an empty key (8) + a type (4) + a one-byte value
        self._count(n_kv, 13, "metadata_kv_count")
        self.metadata: dict[str, object] = {"GGUF.version": version, "GGUF.tensor_count": n_tensors}
        self.types = {"GGUF.version": (4, None), "GGUF.tensor_count": (10, None)}
        for index in range(n_kv):
            self._field = f"metadata entry {index}"
            key = self._string()
            self._field = f"metadata key {key!r}"
            if key in self.metadata:
                raise self._fail(f"GGUF metadata key {key!r} appears twice")
            (kind,) = self._take("<I")
            element = None
            if kind == _ARRAY:
                element, count = self._take("<IQ")
                self.metadata[key] = self._array(element, count)
            else:
                self.metadata[key] = self._value(kind)
            self.types[key] = (kind, element)
        # the smallest tensor info: an empty name (8) + n_dims (4) + one dimension (8) + type (4) + offset (8)
        self._field = "the tensor count"
        self._count(n_tensors, 32, "tensor_count")
        infos = []
        for index in range(n_tensors):
            self._field = f"tensor info {index}"
            name = self._string()
            self._field = f"tensor {name!r}"
            (n_dims,) = self._take("<I")
            if not 1 <= n_dims <= _MAX_DIMS:
                raise self._fail(f"GGUF tensor {name!r} has {n_dims} dimensions (a GGUF tensor has 1 to {_MAX_DIMS})")
            ne = self._take(f"<{n_dims}Q")
            kind, offset = self._take("<IQ")
            infos.append((name, ne, kind, offset))
        alignment = self.metadata.get("general.alignment", 32)
        kind, _ = self.types.get("general.alignment", (4, None))
        if kind not in _INTEGER_TYPES or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
            raise self._fail(f"GGUF metadata key 'general.alignment' must be a positive power of two, not {alignment!r}")
        data_start = -(-self._pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, ne, kind, offset in infos:
            if name in self.tensors:
                raise self._fail(f"GGUF tensor {name!r} appears twice")
            try:
                qtype = GGMLQuantizationType(kind)
            except ValueError:
                raise self._fail(f"GGUF tensor {name!r} has unknown type {kind}") from None
            block, type_size = GGML_QUANT_SIZES[qtype]
            if any(d == 0 for d in ne):
                raise self._fail(f"GGUF tensor {name!r} has an empty dimension (ne {list(ne)})")
            if ne[0] % block:
                raise self._fail(
                    f"GGUF tensor {name!r}: its row of {ne[0]} elements is not a whole number of {qtype.name} blocks ({block})"
                )
            if offset % alignment:
                raise self._fail(f"GGUF tensor {name!r} has data offset {offset}, not a multiple of the alignment {alignment}")
            elements = math.prod(ne)  # Python integers: no overflow, whatever the header says
            info = TensorInfo(name, tuple(int(d) for d in ne), qtype, data_start + offset, elements // block * type_size)
            if info.offset + info.nbytes > self.file_size:
                raise SourceError(
                    f"{self.path}: truncated GGUF file: tensor {name} ends at byte {info.offset + info.nbytes}, "
                    f"the file has {self.file_size}"
                )
            self.tensors[name] = info

    # -- tensor data --------------------------------------------------------------------------
    def data(self, info: TensorInfo) -> np.ndarray:
        """A read-only view of a tensor's bytes, shaped as gguf-py shapes it.

        Float and integer types come as their numpy dtype in numpy dimension order;
        block-quantized types (and BF16) as uint8 with the innermost dimension in bytes,
        which is what `gguf.quants.dequantize` takes.
        """
        import numpy as np
        from gguf.quants import quant_shape_to_byte_shape

        dtype = _PLAIN_TYPES.get(info.type)
        if dtype is not None:
            dtype = np.dtype(dtype)
            count = int(np.prod(info.ne, dtype=np.int64))
            return np.frombuffer(self._buf, dtype, count, info.offset).reshape(info.shape)
        shape = quant_shape_to_byte_shape(info.shape, info.type)
        return np.frombuffer(self._buf, np.uint8, info.nbytes, info.offset).reshape(shape)

    def release(self, info: TensorInfo) -> None:
        """Drop a tensor's pages from this process (MADV_DONTNEED; they stay in the page cache and
        come back if read again), so a compile's RSS does not grow with every weight it has read."""
        from ..pages import release_pages  # only a compile needs it

        release_pages(self._map, info.offset, info.nbytes)


# numpy dtypes by name: numpy is imported only when tensor data is read
_PLAIN_TYPES = {
    GGMLQuantizationType.F32: "<f4",
    GGMLQuantizationType.F16: "<f2",
    GGMLQuantizationType.F64: "<f8",
    GGMLQuantizationType.I8: "i1",
    GGMLQuantizationType.I16: "<i2",
    GGMLQuantizationType.I32: "<i4",
    GGMLQuantizationType.I64: "<i8",
}
