"""The weight store of a Hugging Face checkpoint: canonical names over its safetensors, memory-mapped, each
weight converted to the canonical convention as it is read (the family's `names` say how: reader.py).

`reader.open_weights` makes one; a description needs none (it reads the same headers, no data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ...util.lazy_import import lazy_module
from ...weights import TensorInfo, Weight
from .experts import Entry, ExpertTensor, parts_of
from .safetensors import SafetensorsFile

if TYPE_CHECKING:
    import numpy as np

    from ...util.arrays import Bfloat16Rows
else:
    np = lazy_module("numpy")  # read when a weight is


class HFWeightStore:
    """Canonical view of HF safetensors: memory-mapped, converting norms and A_log on read."""

    def __init__(self, files: dict[str, SafetensorsFile], entries: dict[str, Entry | ExpertTensor], tied: bool, names):
        self._files = files
        self._entries = dict(entries)
        self._names = names  # the family's names and conventions (reader.py: `_QwenNames`, a family module's)
        if tied and "embed_tokens.weight" in self._entries:
            self._entries["lm_head.weight"] = self._entries["embed_tokens.weight"]

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def source_name(self, name: str) -> str:
        return self._names.source_name(name)

    def names(self) -> Iterable[str]:
        return sorted(self._entries)

    def info(self, name: str) -> TensorInfo:
        value = self._entries[name]
        if isinstance(value, ExpertTensor):
            filename, hf_name = value.parts[0]
            return TensorInfo(name, value.shape(self._files), self._files[filename].value_dtype(hf_name))
        filename, hf_name = value
        st = self._files[filename]
        dtype = "float32" if self._names.needs_conversion(name) else st.value_dtype(hf_name)
        shape = tuple(st.shape(hf_name))
        reshaped = getattr(self._names, "canonical_shape", None)  # the vision tower's patch embedding flattened
        return TensorInfo(name, reshaped(name, shape) if reshaped is not None else shape, dtype)

    def read(self, name: str) -> Weight:
        value = self._entries[name]
        if isinstance(value, ExpertTensor):
            return value.read(self._files)
        filename, hf_name = value
        return self._names.to_canonical_value(name, self._files[filename].read(hf_name))

    def read_rows(self, name: str) -> "Weight | Bfloat16Rows":
        """`read`, except that a bfloat16 tensor stored as is comes as `Bfloat16Rows`: widened where it
        is copied (transposed, quantized a few rows at a time), so its float32 copy never exists whole."""
        value = self._entries[name]
        if isinstance(value, ExpertTensor):  # stacked from several tensors: read whole
            return self.read(name)
        filename, hf_name = value
        bits = None if self._names.needs_conversion(name) else self._files[filename].read_bfloat16_bits(hf_name)
        if bits is None:
            return self.read(name)
        from ...util.arrays import Bfloat16Rows

        return Bfloat16Rows(bits)

    def read_float(self, name: str) -> np.ndarray:
        value = self.read(name)
        return value if value.dtype == np.float32 else value.astype(np.float32)

    def read_float_rows(self, name: str) -> "np.ndarray | Bfloat16Rows":
        """`read_float`, or a bfloat16 tensor as `Bfloat16Rows` (its rows widened when sliced)."""
        from ...util.arrays import Bfloat16Rows

        rows = self.read_rows(name)
        return rows if isinstance(rows, Bfloat16Rows) else self.read_float(name)

    def read_experts(self, name: str, start: int, stop: int, *, as_float: bool = True) -> np.ndarray:
        """Experts `start:stop` of a stacked expert tensor (`[E, ...]`), float32, their bytes alone read."""
        value = self._entries[name]
        if isinstance(value, ExpertTensor):
            return value.read_experts(self._files, start, stop)
        return np.array(self.read(name)[start:stop], dtype=np.float32)

    def release_experts(self, name: str, start: int, stop: int) -> None:
        """Drop the pages of experts `start:stop` once they are written."""
        value = self._entries[name]
        if isinstance(value, ExpertTensor):
            value.release_experts(self._files, start, stop)

    def release(self, name: str) -> None:
        """Drop the tensor's pages from this process once it is written (they stay in the page cache)."""
        for filename, hf_name in parts_of(self._entries[name]):
            self._files[filename].release(hf_name)

    def close(self) -> None:
        for st in self._files.values():
            st.close()
