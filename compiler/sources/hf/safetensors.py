"""Reading the safetensors format with numpy only: 8-byte little-endian header length, JSON header, raw data.

Reading memory-maps the file once; each tensor is a view into that map, so
nothing is loaded until used. numpy has no bfloat16: BF16 tensors are widened to
float32 on read (exact: bf16 is the upper half of a float32). The header alone
needs no numpy (imported when a tensor is first read): `check SPEC` and `inspect`
read headers only.
"""

from __future__ import annotations

import json
import math
import mmap
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from ...util.diagnostics import SourceError
from ...util.lazy_import import lazy_module
from ..pages import release_pages

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

# Each safetensors dtype as numpy stores it (BF16 as its raw bits, widened on read): the numpy type
# string, its size in bytes, and the numpy dtype name of what `read` returns.
_DTYPES = {
    "F64": ("<f8", 8, "float64"),
    "F32": ("<f4", 4, "float32"),
    "F16": ("<f2", 2, "float16"),
    "BF16": ("<u2", 2, "float32"),
    "I64": ("<i8", 8, "int64"),
    "I32": ("<i4", 4, "int32"),
    "I16": ("<i2", 2, "int16"),
    "I8": ("i1", 1, "int8"),
    "U8": ("u1", 1, "uint8"),
    "BOOL": ("?", 1, "bool"),
    # float8_e4m3fn (DeepSeek-V3's weights): raw bits here; read as float32 through its block scales (`fp8.py`).
    "F8_E4M3": ("u1", 1, "float32"),
}
FLOAT8_E4M3 = "F8_E4M3"
_MAX_HEADER = 100 * 1024 * 1024
_MAX_RANK = 8


class SafetensorsFile:
    """One `.safetensors` file: its header, and memory-mapped tensors on demand."""

    def __init__(self, path: str | Path, *, header: tuple[int, bytes] | None = None, file_size: int | None = None):
        """The file at `path`, its header read from it; or, with `header` (its length and JSON bytes, as a hub
        range request reads them, `sources/hub/remote.py`) and `file_size`, a file not on this machine yet,
        checked the same way (its tensors are read once it is)."""
        self.path = Path(path)
        if header is None:
            file_size, header = self._read_header()
        header_len, raw = header
        assert file_size is not None
        try:
            parsed = _parse(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError):
            raise SourceError(f"{self.path}: not a safetensors file (header is not JSON)") from None
        except _Duplicate as e:
            raise SourceError(f"{self.path}: not a safetensors file (header names {e.args[0]!r} twice)") from None
        self._init_from(parsed, header_len, file_size)

    def _read_header(self) -> tuple[int, tuple[int, bytes]]:
        try:
            file_size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                raw_len = f.read(8)
                if len(raw_len) != 8:
                    raise SourceError(f"{self.path}: not a safetensors file (shorter than 8 bytes)")
                header_len = header_length(self.path, raw_len, file_size)
                return file_size, (header_len, f.read(header_len))
        except OSError as e:
            raise SourceError(f"{self.path}: cannot read: {e.strerror}") from None

    def _init_from(self, header: object, header_len: int, file_size: int) -> None:
        if not isinstance(header, dict):
            raise SourceError(f"{self.path}: not a safetensors file (header is not a JSON object)")
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise SourceError(f"{self.path}: header field __metadata__ must map names to strings")
        self.metadata: dict[str, str] = metadata
        self._entries: dict[str, dict] = header
        self._data_start = 8 + header_len
        self._map: np.memmap | None = None
        # Checked from the header alone when the file is opened, so a damaged or truncated
        # checkpoint fails `describe` (and `mtpc inspect`), not the first read of a weight. A 92k-tensor
        # checkpoint (DeepSeek-V3) has every entry checked here: the loop is written for that (each entry's
        # fields read once, the common case decided in a few comparisons); `_check_entry` words a refusal.
        sizes = _SIZES
        extents = []
        last = 0
        for name, entry in header.items():
            try:
                dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
                count, bound = 1, 1
                for d in shape:
                    if type(d) is not int or d < 0:
                        raise TypeError
                    count *= d
                    bound *= d or 1
                usable = (type(begin) is int and type(end) is int and 0 <= begin <= end and type(shape) is list
                          and len(shape) <= _MAX_RANK and bound < _HUGE and end - begin == count * sizes[dtype])
            except (TypeError, KeyError, ValueError):  # not a dict, a field missing or of another shape
                usable = False
            if not usable:
                self._check_entry(name, entry)  # raises, naming what is wrong
                begin, end = entry["data_offsets"]
            if end > last:
                last = end
            if begin != end:
                extents.append((begin, end))
        if self._data_start + last > file_size:
            end, name = min((e["data_offsets"][1], n) for n, e in header.items()
                            if self._data_start + e["data_offsets"][1] > file_size)
            raise SourceError(f"{self.path}: truncated: tensor {name!r} ends at byte {self._data_start + end}, the file has {file_size}")
        extents.sort()
        if any(begin < end for (_, end), (begin, _) in zip(extents, extents[1:])):
            named = sorted((e["data_offsets"][0], e["data_offsets"][1], n) for n, e in header.items()
                           if e["data_offsets"][0] != e["data_offsets"][1])
            for (_, end, before), (begin, _, name) in zip(named, named[1:]):
                if begin < end:
                    raise SourceError(f"{self.path}: tensor {name!r} overlaps tensor {before!r} (data_offsets)")

    def _check_entry(self, name: str, entry: object) -> None:
        """A header entry is usable: a known dtype and a byte range that matches its shape."""
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise SourceError(f"{self.path}: tensor {name!r} has unsupported dtype {dtype!r}")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")  # type: ignore[union-attr]
        if not isinstance(shape, list) or len(shape) > _MAX_RANK or not all(_is_count(d) for d in shape):
            raise SourceError(f"{self.path}: tensor {name!r} has a malformed shape {shape!r}")
        if math.prod(max(d, 1) for d in shape) >= 2**62:  # numpy cannot shape even an empty array past this
            raise SourceError(f"{self.path}: tensor {name!r} has an impossible shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets)) and offsets[0] <= offsets[1]):
            raise SourceError(f"{self.path}: tensor {name!r} has malformed data_offsets {offsets!r}")
        begin, end = offsets
        # Python integers: a hostile shape cannot overflow into a matching size.
        if end - begin != math.prod(shape) * _DTYPES[dtype][1]:
            raise SourceError(f"{self.path}: tensor {name!r} byte range does not match its shape and dtype")

    def names(self) -> list[str]:
        return sorted(self._entries)

    @property
    def entries(self) -> dict[str, dict]:
        """The header's entries (name -> `dtype`, `shape`, `data_offsets`), checked; for readers that go over
        every tensor of a 92k-tensor checkpoint, where a method call per field costs (read only)."""
        return self._entries

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def dtype_code(self, name: str) -> str:
        return self._entries[name]["dtype"]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entries[name]["shape"])

    def value_dtype(self, name: str) -> str:
        """The name of the numpy dtype `read` returns ("float32" for BF16), known from the header alone."""
        return _DTYPES[self._entries[name]["dtype"]][2]

    def close(self) -> None:
        """Drop this file's map; views already handed out keep it alive until they go."""
        self._map = None

    def release(self, name: str, rows: tuple[int, int] | None = None) -> None:
        """Drop the tensor's pages from this process (MADV_DONTNEED): a compile that has written a weight
        no longer counts it in its RSS; the pages stay in the page cache and come back if read again.
        `rows` `(start, stop)`: only those indices of its first axis (one expert of a fused stack)."""
        if self._map is None:
            return
        begin, end = self._entries[name]["data_offsets"]
        if rows is not None:
            per = (end - begin) // max(1, self.shape(name)[0])
            begin, end = begin + rows[0] * per, begin + rows[1] * per
        # numpy's mmap.mmap, starting at the allocation boundary at or before the data (a private attribute:
        # without it, nothing is released)
        mapped = getattr(self._map, "_mmap", None)
        if mapped is None:
            return
        release_pages(mapped, begin + self._map.offset - self._map_start(), end - begin)

    def _map_start(self) -> int:
        """Where, in the file, numpy's mapping starts (the allocation boundary at or before the data)."""
        return self._data_start - self._data_start % mmap.ALLOCATIONGRANULARITY

    def read(self, name: str) -> np.ndarray:
        """The tensor: a read-only memmap view, or a float32 copy for BF16."""
        if self._entries[name]["dtype"] == FLOAT8_E4M3:  # `fp8.Fp8File` reads these, with their scales
            raise SourceError(f"{self.path}: tensor {name!r} is {FLOAT8_E4M3} and has no block scales to read it with")
        stored = self._stored(name)
        if self._entries[name]["dtype"] != "BF16":
            return stored
        from ...util.arrays import widen_bfloat16

        return widen_bfloat16(stored)

    def read_bfloat16_bits(self, name: str) -> np.ndarray | None:
        """A BF16 tensor's raw bits (uint16, a read-only memmap view), for widening where they are
        written (`mtpc.util.arrays`); None for any other dtype."""
        return self._stored(name) if self._entries[name]["dtype"] == "BF16" else None

    def read_float8_bits(self, name: str) -> np.ndarray:
        """An F8_E4M3 tensor's raw bits (uint8, a read-only memmap view), for `fp8.dequantize`."""
        assert self._entries[name]["dtype"] == FLOAT8_E4M3
        return self._stored(name)

    def _stored(self, name: str) -> np.ndarray:
        """The tensor as stored (BF16 as its raw uint16 bits): a read-only memmap view, zeros when empty."""
        entry = self._entries[name]
        begin, end = entry["data_offsets"]
        dtype, shape = np.dtype(_DTYPES[entry["dtype"]][0]), tuple(entry["shape"])
        if end == begin:
            return np.zeros(shape, dtype)
        return self._mapped()[begin:end].view(dtype).reshape(shape)

    def _mapped(self) -> np.memmap:
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self._data_start)
        return self._map


_SIZES = {code: size for code, (_, size, _) in _DTYPES.items()}
_HUGE = 2**62  # numpy cannot shape even an empty array past this many elements
_ENTRY_KEYS = (b'"dtype"', b'"shape"', b'"data_offsets"')


def _parse(raw: bytes) -> object:
    """The header's JSON, every object's keys distinct (`_Duplicate` names one that is not).

    Parsed by the json module's C decoder, with no hook: a hook on every object costs a 92k-tensor header
    most of a second. The keys are held distinct by counting instead: each tensor entry spells `"dtype"`,
    `"shape"` and `"data_offsets"` once, so a name given twice, or a field given twice in one entry, leaves
    fewer entries than spellings; only then (or when a name itself spells one of those) is the header parsed
    again with the hook, which says which key repeats. `__metadata__`'s own keys are checked with the hook."""
    text = raw.decode("utf-8")
    parsed = json.loads(text)
    if not isinstance(parsed, dict):
        return parsed
    entries = len(parsed) - ("__metadata__" in parsed)
    if any(raw.count(key) != entries for key in _ENTRY_KEYS) or raw.count(b'"__metadata__"') > 1:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    if "__metadata__" in parsed:
        start = text.index('"__metadata__"') + len('"__metadata__"')
        start = text.index(":", start) + 1
        while text[start] in " \t\r\n":
            start += 1
        json.JSONDecoder(object_pairs_hook=_no_duplicates).raw_decode(text, start)
    return parsed


def header_length(path: Path | str, raw_len: bytes, file_size: int) -> int:
    """The header's length from the file's first 8 bytes, refused when no safetensors file could have it."""
    (header_len,) = struct.unpack("<Q", raw_len)
    if header_len > _MAX_HEADER:
        raise SourceError(f"{path}: not a safetensors file (header length {header_len})")
    if header_len > file_size - 8:
        raise SourceError(f"{path}: truncated: the header length is {header_len} bytes, the file has {file_size - 8} after it")
    return header_len


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

