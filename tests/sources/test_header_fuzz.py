"""Property tests: a mutated GGUF or safetensors header is a SourceError naming the file, nothing else.

Small valid files (written by the test fixtures) are damaged by hypothesis: bytes flipped,
the file cut short, count / length fields set to huge values, type codes changed, header JSON
fields replaced. Reading must either succeed (the mutation was harmless) or raise a
`SourceError` whose message names the file; never another exception, a hang (the deadline),
or an allocation sized by the header. Budget: `tests/sources/fuzzing.py`.
"""

from __future__ import annotations

import io
import json
import struct
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT, GGUFWriter
from hypothesis import given, strategies as st

from mtpc.cli.main import main
from mtpc.util.diagnostics import ExitCode, SourceError
from mtpc.ir import SourceRef
from mtpc.sources import describe, open_weights
from mtpc.sources.gguf.header import GGUFHeader
from mtpc.sources.gguf.metadata import Metadata
from mtpc.sources.hf.safetensors import SafetensorsFile
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import write_gguf
from tests.fixtures.safetensors_writer import write_safetensors

from .fuzzing import FUZZ, gguf_fields

HUGE = st.sampled_from([2**64 - 1, 2**63, 2**62 + 7, 2**40, 2**32 + 1, 2**31, 10**9, 123457])


# ----------------------------------------------------------------------------- GGUF


def _small_gguf(path: Path) -> Path:
    """Every kind of header field: scalars, a string, arrays of ints, strings and arrays, float and quantized tensors."""
    w = GGUFWriter(str(path), arch="qwen35")
    w.add_block_count(2)
    w.add_uint64("test.u64", 7)
    w.add_float32("test.f32", 0.5)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "hello")
    w.add_array("test.ints", [1, 2, 3])
    w.add_array("test.strings", ["a", "bc", ""])
    w.add_array("test.nested", [[1, 2], [3]])
    w.add_tensor("a.weight", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("b.weight", np.ones((32,), np.float16))
    w.add_tensor("c.weight", np.zeros((1, 34), np.uint8), raw_dtype=QT.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory) -> bytes:
    return _small_gguf(tmp_path_factory.mktemp("fuzz") / "small.gguf").read_bytes()


@pytest.fixture(scope="module")
def model_gguf(tmp_path_factory) -> bytes:
    """A whole tiny Qwen3.5 with a tokenizer (the header is what gets mutated; the tensors follow it)."""
    arch = tiny_arch(vocab_size=272)
    return write_gguf(tmp_path_factory.mktemp("fuzz") / "model.gguf", arch, tokenizer=True).read_bytes()


@st.composite
def gguf_mutation(draw, raw: bytes) -> bytes:
    counts, types, header_end = gguf_fields(raw)
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "huge", "type", "version", "count"]))
        if kind == "flip":
            at = draw(st.integers(0, min(header_end, len(data)) - 1))
            data[at] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif kind == "huge":
            at = draw(st.sampled_from(counts))
            data[at : at + 8] = struct.pack("<Q", draw(HUGE))
        elif kind == "count":  # a count a little off: one more or fewer entries than written
            at = draw(st.sampled_from(counts))
            (value,) = struct.unpack_from("<Q", raw, at)
            data[at : at + 8] = struct.pack("<Q", max(0, value + draw(st.sampled_from([-1, 1, 2]))))
        elif kind == "type":
            at = draw(st.sampled_from(types))
            data[at : at + 4] = struct.pack("<I", draw(st.one_of(st.integers(0, 40), st.just(2**32 - 1))))
        else:
            data[4:8] = struct.pack("<I", draw(st.integers(0, 2**32 - 1)))
        if not data:
            break
    return bytes(data)


def _read_header(path: Path) -> None:
    header = GGUFHeader(str(path))
    for info in header.tensors.values():  # every tensor the header accepted lies inside the file
        header.data(info)


@FUZZ
@given(data=st.data())
def test_a_mutated_gguf_header_is_a_source_error_naming_the_file(small_gguf, tmp_path_factory, data):
    mutated = data.draw(gguf_mutation(small_gguf))
    path = tmp_path_factory.mktemp("case") / "mutated.gguf"
    path.write_bytes(mutated)
    try:
        _read_header(path)
    except SourceError as e:
        assert str(path) in str(e) and e.exit_code is ExitCode.USAGE


@FUZZ
@given(data=st.data())
def test_a_mutated_model_gguf_is_exit_1_or_2_from_inspect(model_gguf, tmp_path_factory, data):
    mutated = data.draw(gguf_mutation(model_gguf))
    path = tmp_path_factory.mktemp("case") / "mutated.gguf"
    path.write_bytes(mutated)
    code, err = _inspect(path)
    assert code in (0, 1, 2), err
    if code:
        assert str(path) in err, err
        return
    # inspect accepted it: what compile reads next (the tokenizer, every weight) fails as cleanly
    ref = SourceRef("gguf", str(path))
    try:
        info = describe(ref)
        info.tokenizer_files
        store = open_weights(ref, info)
        for name in store.names():
            store.read(name)
    except SourceError as e:
        assert str(path) in str(e)


def _inspect(path: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["inspect", str(path)])
    return code, err.getvalue()


def test_gguf_field_walker_covers_the_header(small_gguf, tmp_path):
    """The test's own walker and mtpc's reader agree on where the header ends (so mutations hit fields)."""
    counts, types, end = gguf_fields(small_gguf)
    (tmp_path / "s.gguf").write_bytes(small_gguf)
    header = GGUFHeader(str(tmp_path / "s.gguf"))
    assert counts[:2] == [8, 16] and len(types) == 9 + 5 + 3  # kv types, array element types (nested too), tensor types
    assert end <= min(i.offset for i in header.tensors.values()) < end + 32


# Each field a metadata reader (`Metadata.get`) expects, given the wrong type.
@pytest.mark.parametrize(
    "key, value, message",
    [
        ("qwen35.block_count", "four", "'qwen35.block_count' must be a non-negative integer, not a string"),
        ("qwen35.block_count", 1.5, "'qwen35.block_count' must be a non-negative integer, not a float32 (1.5)"),
        ("qwen35.block_count", -3, "'qwen35.block_count' must be a non-negative integer, not a int32 (-3)"),
        ("qwen35.rope.freq_base", "x", "'qwen35.rope.freq_base' must be a number, not a string"),
        ("tokenizer.ggml.tokens", [1, 2], "'tokenizer.ggml.tokens' must be an array of strings, not an array of int32"),
    ],
)
def test_metadata_of_the_wrong_type_names_key_and_type(tmp_path, key, value, message):
    w = GGUFWriter(str(tmp_path / "m.gguf"), arch="qwen35")
    if isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:
        w.add_int32(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(SourceError) as caught:
        meta = Metadata(GGUFHeader(str(tmp_path / "m.gguf")), str(tmp_path / "m.gguf"))
        meta.get(key.replace("qwen35.", "{arch}."))
    assert message in str(caught.value) and str(tmp_path / "m.gguf") in str(caught.value)


# ----------------------------------------------------------------------------- safetensors


@pytest.fixture(scope="module")
def small_safetensors(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / "small.safetensors"
    tensors = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.ones(4, np.float16),
        "c": np.zeros((0, 3), np.float32),
        "d": np.arange(3, dtype=np.int64),
    }
    write_safetensors(path, tensors, metadata={"format": "pt"})
    return path.read_bytes()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | HUGE | st.floats(allow_nan=True) | st.text(max_size=6),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


@st.composite
def safetensors_mutation(draw, raw: bytes) -> bytes:
    (n,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8 : 8 + n])
    body = raw[8 + n :]
    kind = draw(st.sampled_from(["field", "entry", "length", "flip", "truncate", "dtype"]))
    if kind in ("field", "entry", "dtype"):
        name = draw(st.sampled_from(sorted(header)))
        if kind == "entry":
            header[name] = draw(JSON_VALUES)
        elif kind == "dtype" and name != "__metadata__":
            header[name]["dtype"] = draw(st.sampled_from(["F8_E4M3", "I32", "BF16", "F64", "U8", "", "f32"]))
        elif name != "__metadata__":
            field = draw(st.sampled_from(["shape", "data_offsets", "dtype"]))
            if draw(st.booleans()) and isinstance(header[name].get(field), list) and header[name][field]:
                items = header[name][field]
                items[draw(st.integers(0, len(items) - 1))] = draw(st.one_of(HUGE, st.integers(-5, 50), JSON_VALUES))
            else:
                header[name][field] = draw(JSON_VALUES)
        encoded = json.dumps(header).encode()
        return struct.pack("<Q", len(encoded)) + encoded + body
    data = bytearray(raw)
    if kind == "length":
        data[0:8] = struct.pack("<Q", draw(st.one_of(HUGE, st.integers(0, len(raw) + 8))))
    elif kind == "flip":
        data[draw(st.integers(0, 8 + n - 1))] = draw(st.integers(0, 255))
    else:
        del data[draw(st.integers(0, len(data) - 1)) :]
    return bytes(data)


@FUZZ
@given(data=st.data())
def test_a_mutated_safetensors_header_is_a_source_error_naming_the_file(small_safetensors, tmp_path_factory, data):
    path = tmp_path_factory.mktemp("case") / "mutated.safetensors"
    path.write_bytes(data.draw(safetensors_mutation(small_safetensors)))
    try:
        st_file = SafetensorsFile(path)
        for name in st_file.names():  # whatever the header accepted can be read
            st_file.read(name)
    except SourceError as e:
        assert str(path) in str(e) and e.exit_code is ExitCode.USAGE


def test_an_empty_tensor_with_a_huge_dimension_is_refused(tmp_path):
    """Found by the fuzzer (MTPC_FUZZ_EXAMPLES=3000): 0 bytes, but numpy cannot shape it (was a ValueError)."""
    header = json.dumps({"c": {"dtype": "F32", "shape": [0, 2**64 - 1], "data_offsets": [0, 0]}}).encode()
    (tmp_path / "e.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(SourceError, match=r"e.safetensors: tensor 'c' has an impossible shape \[0, 18446744073709551615\]"):
        SafetensorsFile(tmp_path / "e.safetensors")


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory) -> Path:
    return write_hf_checkpoint(tmp_path_factory.mktemp("fuzz") / "ckpt", tiny_arch(), seed=0)


@FUZZ
@given(data=st.data())
def test_a_mutated_checkpoint_is_exit_1_or_2_from_inspect(hf_checkpoint, tmp_path_factory, data):
    directory = tmp_path_factory.mktemp("case")
    for f in hf_checkpoint.iterdir():
        (directory / f.name).write_bytes(f.read_bytes())
    raw = (hf_checkpoint / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes(data.draw(safetensors_mutation(raw)))
    code, err = _inspect(directory)
    assert code in (0, 1, 2), err
    if code:
        assert str(directory) in err, err
