"""FP8 block-quantized weights (DeepSeek-V3's release), dequantized on read.

DeepSeek-V3's safetensors store each linear weight `W [N, K]` as `float8_e4m3fn` (safetensors dtype
`F8_E4M3`) beside `<name>_scale_inv` (`weight_scale_inv`), float32 `[ceil(N / bn), ceil(K / bk)]`, where
config.json's `quantization_config.weight_block_size` is `[bn, bk]` (`[128, 128]`). The float weight is
`W[i, j] = fp8(W[i, j]) * scale_inv[i // bn, j // bk]` (DeepSeek's `weight_dequant`, transformers'
FineGrainedFP8 dequantization). Every e4m3fn value is exact in float32 and the product is rounded once,
so the float32 weight mtpc reads is the one those compute in float32.

`pair_block_scales` runs over a folder's listing once its headers are parsed: each FP8 weight is paired
with its scale from the headers alone (shapes and dtypes checked, errors naming the file, tensor and
field), the scales leave the listing (consumed, never reported as unknown tensors) and the files
holding FP8 weights are wrapped so that `read` returns float32. `describe` reports such a weight as
float32 (`value_dtype`) and its storage as `F8_E4M3`, reading no bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...util.diagnostics import SourceError
from ...util.lazy_import import lazy_module
from .config import read_json
from .safetensors import FLOAT8_E4M3, SafetensorsFile

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

SCALE_SUFFIX = "_scale_inv"
SCALE_DTYPES = ("F32", "BF16", "F16")
_QUANT = "quantization_config"

Listed = dict[str, list[str]]


def e4m3fn_values() -> np.ndarray:
    """float32 value of each of the 256 `float8_e4m3fn` bit patterns: 1 sign, 4 exponent (bias 7) and 3
    mantissa bits; exponent 0 is subnormal (m / 8 x 2^-6); only S.1111.111 is NaN (no infinities)."""
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent, mantissa = (bits >> 3) & 0xF, bits & 0x7
    magnitude = np.where(exponent == 0, mantissa / 8.0 * 2.0**-6, (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    values = sign * magnitude
    values[(exponent == 0xF) & (mantissa == 0x7)] = np.nan
    return values.astype(np.float32)


def dequantize(bits: np.ndarray, scale_inv: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """float32 `[N, K]` from e4m3fn bits `[N, K]` (uint8) and block scales `[ceil(N / bn), ceil(K / bk)]`."""
    out = e4m3fn_values()[bits]
    bn, bk = block
    k = out.shape[1]
    for i in range(scale_inv.shape[0]):  # a block row at a time: no scale array the size of the weight
        out[i * bn : (i + 1) * bn] *= np.repeat(np.asarray(scale_inv[i], np.float32), bk)[:k]
    return out


class Fp8File:
    """A safetensors file whose FP8 weights read as float32 (their scales may live in other files)."""

    def __init__(self, file: SafetensorsFile, scales: dict[str, tuple[SafetensorsFile, str]], block: tuple[int, int]):
        self._file, self._scales, self._block = file, scales, block

    def __getattr__(self, attr: str):  # path, names, shape, dtype_code, value_dtype, metadata, close, ...
        return getattr(self._file, attr)

    def __contains__(self, name: str) -> bool:
        return name in self._file

    def read(self, name: str) -> np.ndarray:
        if name not in self._scales:
            return self._file.read(name)
        scale_file, scale_name = self._scales[name]
        return dequantize(self._file.read_float8_bits(name), scale_file.read(scale_name), self._block)

    def release(self, name: str, rows: tuple[int, int] | None = None) -> None:
        self._file.release(name, rows)
        if name in self._scales:
            scale_file, scale_name = self._scales[name]
            scale_file.release(scale_name)


def pair_block_scales(directory: Path, listed: Listed, opened: dict[str, SafetensorsFile]
                      ) -> tuple[Listed, dict[str, SafetensorsFile | Fp8File]]:
    """(the listing without the consumed scales, the files with FP8 weights wrapped); unchanged without FP8.

    DeepSeek-V3 pairs 46k weights with their scales: the header entries are read directly (`entries`)."""
    entries = {f: st.entries for f, st in opened.items()}
    fp8 = [(f, n) for f, names in sorted(listed.items()) for e in (entries[f],) for n in names
           if e[n]["dtype"] == FLOAT8_E4M3]
    if not fp8:
        return listed, dict(opened)
    block = _block_size(directory, opened[fp8[0][0]].path, fp8[0][1])
    where: dict[str, str] | None = None  # name -> file, made only for a scale kept in another file than its weight
    scales: dict[str, dict[str, tuple[SafetensorsFile, str]]] = {f: {} for f in opened}
    consumed: set[str] = set()
    bn, bk = block
    for filename, name in fp8:
        scale_name = name + SCALE_SUFFIX
        if scale_name in entries[filename]:
            scale_filename: str | None = filename
        else:
            if where is None:
                where = {n: f for f, names in listed.items() for n in names}
            scale_filename = where.get(scale_name)
        shape = entries[filename][name]["shape"]
        scale = entries[scale_filename][scale_name] if scale_filename is not None else None
        if (scale is None or len(shape) != 2 or scale["shape"] != [-(-shape[0] // bn), -(-shape[1] // bk)]
                or scale["dtype"] not in SCALE_DTYPES):
            _refuse_pair(opened, filename, name, scale_filename, block)
        scales[filename][name] = (opened[scale_filename], scale_name)
        consumed.add(scale_name)
    scales = {f: pairs for f, pairs in scales.items() if pairs}
    kept = {f: [n for n in names if n not in consumed] for f, names in listed.items()}
    files = {f: Fp8File(st, scales[f], block) if f in scales else st for f, st in opened.items()}
    return {f: names for f, names in kept.items() if names}, files


def _refuse_pair(opened: dict[str, SafetensorsFile], filename: str, name: str, scale_filename: str | None,
                 block: tuple[int, int]) -> None:
    """Why an FP8 weight and its scale cannot be read together, named."""
    st = opened[filename]
    scale_name = name + SCALE_SUFFIX
    if scale_filename is None:
        raise SourceError(f"{st.path}: tensor {name!r} is {FLOAT8_E4M3} without its block scales {scale_name!r}")
    shape = st.shape(name)
    if len(shape) != 2:
        raise SourceError(f"{st.path}: tensor {name!r} is {FLOAT8_E4M3} with shape {list(shape)}; mtpc reads "
                          "FP8 block weights as matrices [N, K]")
    scale_file = opened[scale_filename]
    expected = [-(-shape[0] // block[0]), -(-shape[1] // block[1])]
    if list(scale_file.shape(scale_name)) != expected:
        raise SourceError(f"{scale_file.path}: tensor {scale_name!r} has shape {list(scale_file.shape(scale_name))}; "
                          f"{name!r} {list(shape)} in {block[0]}x{block[1]} blocks needs {expected}")
    raise SourceError(f"{scale_file.path}: tensor {scale_name!r} has dtype {scale_file.dtype_code(scale_name)}; "
                      f"block scales must be {', '.join(SCALE_DTYPES)}")


def _block_size(directory: Path, first_file: Path, first: str) -> tuple[int, int]:
    """config.json's `quantization_config.weight_block_size`, required once a weight is FP8."""
    path = directory / "config.json"
    quant = read_json(path).get(_QUANT) if path.is_file() else None
    if not isinstance(quant, dict):
        raise SourceError(f"{first_file}: tensor {first!r} is {FLOAT8_E4M3}, but {path} has no {_QUANT} "
                          "(its weight_block_size says how the block scales apply)")
    method = quant.get("quant_method")
    if method != "fp8":
        raise SourceError(f"{path}: field {_QUANT}.quant_method is {method!r}; FP8 block weights need 'fp8'")
    fmt = quant.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise SourceError(f"{path}: field {_QUANT}.fmt is {fmt!r}; mtpc reads e4m3 FP8 weights")
    size = quant.get("weight_block_size")
    if not (isinstance(size, list) and len(size) == 2
            and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size)):
        raise SourceError(f"{path}: field {_QUANT}.weight_block_size must be two positive integers [rows, columns], "
                          f"not {size!r}")
    return size[0], size[1]
