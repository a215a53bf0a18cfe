"""safetensors read/write with numpy: layout, dtypes, bf16 rounding, memory mapping, bad files."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from mtpc.util.diagnostics import SourceError
from mtpc.sources.hf.safetensors import SafetensorsFile
from tests.fixtures.safetensors_writer import to_bfloat16_bits, write_safetensors


def test_layout_is_length_json_header_then_aligned_data(tmp_path):
    path = tmp_path / "t.safetensors"
    b = np.arange(3, dtype=np.float16)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    write_safetensors(path, {"b": b, "a": a}, metadata={"format": "pt"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8 : 8 + n])
    assert header["__metadata__"] == {"format": "pt"}
    assert header["a"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}  # sorted by name
    assert header["b"] == {"dtype": "F16", "shape": [3], "data_offsets": [24, 30]}
    data = raw[8 + n :]
    np.testing.assert_array_equal(np.frombuffer(data[:24], "<f4").reshape(2, 3), a)
    np.testing.assert_array_equal(np.frombuffer(data[24:30], "<f2"), b)


def test_round_trip_is_memory_mapped(tmp_path):
    path = tmp_path / "t.safetensors"
    tensors = {"w": np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32), "i": np.arange(4)}
    write_safetensors(path, tensors)
    st = SafetensorsFile(path)
    assert st.names() == ["i", "w"]
    w = st.read("w")
    assert isinstance(w, np.memmap) and not w.flags.writeable
    np.testing.assert_array_equal(w, tensors["w"])
    np.testing.assert_array_equal(st.read("i"), tensors["i"])
    assert st.shape("w") == (4, 5) and st.dtype_code("w") == "F32" and st.dtype_code("i") == "I64"


def test_writes_are_deterministic(tmp_path):
    tensors = {f"t{i}": np.full((2,), i, np.float32) for i in (3, 1, 2)}
    write_safetensors(tmp_path / "a", tensors)
    write_safetensors(tmp_path / "b", dict(reversed(list(tensors.items()))))
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_bfloat16_rounds_to_nearest_even_and_widens_exactly(tmp_path):
    # bf16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (ties go to even 1.0),
    # 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6 (ties go to even 1 + 2^-6).
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-12, -2.5], np.float32)
    np.testing.assert_array_equal(to_bfloat16_bits(values), [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020])
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"x": values}, float_dtype="BF16")
    back = SafetensorsFile(path).read("x")
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, [1.0, 1.0, 1 + 2**-6, 1 + 2**-7, -2.5])


def test_float_dtype_casts_only_floats(tmp_path):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"f": np.ones(2, np.float32), "i": np.ones(2, np.int32)}, float_dtype="F16")
    st = SafetensorsFile(path)
    assert st.dtype_code("f") == "F16" and st.dtype_code("i") == "I32"


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x01", "shorter than 8 bytes"),
        (struct.pack("<Q", 4) + b"nope", "not JSON"),
        (struct.pack("<Q", 1 << 40), "header length"),
    ],
)
def test_bad_files_raise_source_errors(tmp_path, content, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(SourceError, match=message):
        SafetensorsFile(path)


def test_unsupported_dtype_and_bad_offsets(tmp_path):
    header = json.dumps({"x": {"dtype": "F8_E5M2", "shape": [1], "data_offsets": [0, 1]}}).encode()
    (tmp_path / "a").write_bytes(struct.pack("<Q", len(header)) + header + b"\0")
    with pytest.raises(SourceError, match="unsupported dtype 'F8_E5M2'"):
        SafetensorsFile(tmp_path / "a")
    # F8_E4M3 (DeepSeek-V3's FP8 blocks) is a known dtype, read only through its block scales (hf/fp8.py)
    header = json.dumps({"x": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}).encode()
    (tmp_path / "f8").write_bytes(struct.pack("<Q", len(header)) + header + b"\0")
    with pytest.raises(SourceError, match="'x' is F8_E4M3 and has no block scales"):
        SafetensorsFile(tmp_path / "f8").read("x")
    header = json.dumps({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}).encode()
    (tmp_path / "b").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(SourceError, match="byte range"):
        SafetensorsFile(tmp_path / "b").read("x")


def test_truncated_file_fails_on_open_naming_the_first_tensor_cut(tmp_path):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"a": np.ones(8, np.float32), "b": np.ones(8, np.float32), "c": np.ones(8, np.float32)})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    # Cut inside "b" (data bytes 32..64): "a" is whole, "b" and "c" run past the end.
    path.write_bytes(raw[: 8 + n + 40])
    with pytest.raises(SourceError, match=rf"t.safetensors: truncated: tensor 'b' ends at byte {8 + n + 64}, the file has {8 + n + 40}$"):
        SafetensorsFile(path)


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"dtype": "F32", "shape": [2]}, "malformed data_offsets None"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}, r"malformed data_offsets \[8, 0\]"),
        ({"dtype": "F32", "shape": [2], "data_offsets": ["0", "8"]}, "malformed data_offsets"),
        ({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}, r"a malformed shape \[-2\]"),
        ({"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}, "a malformed shape '2'"),
    ],
)
def test_malformed_header_entries_fail_on_open(tmp_path, entry, message):
    header = json.dumps({"x": entry}).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    with pytest.raises(SourceError, match=f"tensor 'x' has {message}"):
        SafetensorsFile(path)


def _rss_file() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_DONTNEED"), reason="madvise(MADV_DONTNEED) is Linux's")
def test_release_drops_a_read_tensors_pages_from_the_process(tmp_path):
    """A compile releases each weight once written: its mapped pages leave the RSS (the page cache keeps them)."""
    size = 32 << 20
    path = tmp_path / "big.safetensors"
    write_safetensors(path, {"a": np.arange(size // 4, dtype=np.float32), "b": np.ones(1024, np.float32)},
                      float_dtype="F32")
    st = SafetensorsFile(path)
    before = _rss_file()
    value = st.read("a")
    assert float(value[:: 1024].sum()) > 0  # touches every page
    touched = _rss_file() - before
    assert touched > size * 3 // 4
    st.release("a")
    assert _rss_file() - before < size // 4
    assert np.array_equal(st.read("a")[:4], np.arange(4, dtype=np.float32))  # still readable: faulted back in
    assert np.array_equal(st.read("b"), np.ones(1024, np.float32))
