"""The GGUF header is read without numpy or gguf-py (issue 10, instant metadata verbs), and reads the same.

`mtpc.sources.gguf.constants` loads gguf-py's own `constants.py` without importing the gguf
package; these tests hold its tables to gguf-py's, check that the enums of a process that had not
imported gguf yet still work with gguf-py once it is, that the float32 rounding written without
numpy is numpy's, and that a string array (the vocabulary) is stepped over by the header walk and
located only when it is read, with the same strings whatever they hold.
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
import warnings

import gguf
import numpy as np
import pytest

from mtpc.sources.gguf import constants as gguf_constants, header as gguf_header
from mtpc.sources.gguf.header import GGUFHeader
from mtpc.sources.gguf.metadata import shortest_float32


def test_the_tables_are_gguf_pys():
    assert {m.name: m.value for m in gguf_constants.GGMLQuantizationType} == {
        m.name: m.value for m in gguf.GGMLQuantizationType
    }
    assert {int(k): v for k, v in gguf_constants.GGML_QUANT_SIZES.items()} == {
        int(k): v for k, v in gguf.GGML_QUANT_SIZES.items()
    }
    assert {m.name: m.value for m in gguf_constants.TokenType} == {m.name: m.value for m in gguf.TokenType}
    for group in ("General", "LLM", "Attention", "Rope", "SSM", "Tokenizer"):
        ours, theirs = getattr(gguf_constants.Keys, group), getattr(gguf.Keys, group)
        assert _keys(ours) == _keys(theirs), group


def _keys(group: type) -> dict:
    """A Keys group's names and values; a nested group (Keys.Attention.Indexer) by its own, since the
    classes loaded before gguf was imported are other classes with the same contents."""
    return {k: _keys(v) if isinstance(v, type) else v for k, v in vars(group).items() if not k.startswith("_")}


PROBE = r"""
import json, sys
from mtpc.sources.gguf.constants import GGMLQuantizationType as QT, GGML_QUANT_SIZES
from mtpc.sources.gguf.header import GGUFHeader
header = GGUFHeader(sys.argv[1])
before = sorted(m for m in ("gguf", "numpy") if m in sys.modules)
import numpy as np
import gguf
from gguf.quants import dequantize, quantize
info = next(i for i in header.tensors.values() if i.type == QT.Q8_0)
values = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
print(json.dumps({
    "before": before,
    "same_class": QT is gguf.GGMLQuantizationType,
    "equal": QT.Q8_0 == gguf.GGMLQuantizationType.Q8_0 and hash(QT.Q8_0) == hash(gguf.GGMLQuantizationType.Q8_0),
    "sizes": gguf.GGML_QUANT_SIZES[info.type] == GGML_QUANT_SIZES[QT.Q8_0],
    "dequantized": bool(np.array_equal(dequantize(quantize(values, QT.Q8_0), QT.Q8_0),
                                       dequantize(quantize(values, gguf.GGMLQuantizationType.Q8_0),
                                                  gguf.GGMLQuantizationType.Q8_0))),
    "data": list(header.data(info).shape),
}))
"""


def test_a_header_read_before_gguf_is_imported_works_with_gguf_py_after(tmp_path):
    from tests.fixtures.arch import tiny_arch
    from tests.fixtures.gguf_writer import MIXED_TYPES, write_gguf

    path = write_gguf(tmp_path / "m.gguf", tiny_arch(vocab_size=300), types=MIXED_TYPES, tokenizer=True)
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["before"] == []  # the header was read with neither imported
    assert result["same_class"] is False  # loaded before gguf: gguf-py's values in a class of their own ...
    assert result["equal"] and result["sizes"] and result["dequantized"]  # ... that works wherever gguf-py's does
    assert len(result["data"]) == 2


def _float32_values() -> list[float]:
    rng = random.Random(0)
    values = [struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0] for _ in range(20000)]
    values += [s * 2.0**e for e in range(-149, 128) for s in (1, -1)]  # the asymmetric gaps at powers of two
    values += [1e-6, 1e-5, 1e7, 1e6, 0.1, 0.25, 3.4028234663852886e38, 1e39, -1e39, 0.0, -0.0, float("inf")]
    return values


def test_float32_rounding_is_numpys():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns about the values beyond float32's range
        expected = [float(str(np.float32(v))) for v in _float32_values()]
    got = [shortest_float32(v) for v in _float32_values()]
    mismatches = [(v, e, g) for v, e, g in zip(_float32_values(), expected, got)
                  if not (e == g or (e != e and g != g)) or str(e) != str(g)]
    assert mismatches == []
    assert shortest_float32(float("nan")) != shortest_float32(float("nan"))


# ----------------------------------------------------------------------------- string arrays


AWKWARD = ["", "a\x00\x00\x00\x00\x00\x00\x00b", "x" * 300, "é" * 200, "\x00", "plain", "", "z"]


@pytest.fixture()
def awkward_gguf(tmp_path):
    """Strings of every shape a length walk must step over: empty, with zero runs, longer than 256 bytes."""
    path = tmp_path / "s.gguf"
    w = gguf.GGUFWriter(str(path), arch="qwen35")
    w.add_array("test.strings", AWKWARD)
    w.add_array("test.many", [f"t{i}" for i in range(5000)])
    w.add_array("test.ints", list(range(-3, 300)))
    w.add_array("test.floats", [0.5, -1.25, 3.0])
    w.add_uint32("test.after", 7)
    w.add_tensor("t", np.arange(32, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_string_arrays_are_stepped_over_and_read_as_written(awkward_gguf, monkeypatch):
    located = []
    real = gguf_header.string_offsets

    def counting(*args):
        located.append(args[2])
        return real(*args)

    monkeypatch.setattr(gguf_header, "string_offsets", counting)
    header = GGUFHeader(str(awkward_gguf))
    # Everything after the arrays is where it should be, and no string has been located.
    assert header.metadata["test.after"] == 7 and list(header.tensors) == ["t"]
    assert np.array_equal(header.data(header.tensors["t"]), np.arange(32, dtype=np.float32))
    assert located == []
    strings = header.metadata["test.strings"]
    assert len(strings) == len(AWKWARD) and located == []
    assert list(strings) == AWKWARD and strings[2] == "x" * 300 and strings[-1] == "z"
    assert strings[1:3] == AWKWARD[1:3]
    assert located == [len(AWKWARD)]  # located once, on first read
    assert list(header.metadata["test.many"]) == [f"t{i}" for i in range(5000)]
    assert header.metadata["test.ints"] == list(range(-3, 300))
    assert header.metadata["test.floats"] == [0.5, -1.25, 3.0]
    reader = gguf.GGUFReader(str(awkward_gguf))
    for key in ("test.strings", "test.many", "test.ints", "test.floats"):
        assert list(header.metadata[key]) == reader.fields[key].contents(), key


def test_a_string_array_cut_short_is_a_truncated_header(awkward_gguf, tmp_path):
    from mtpc.util.diagnostics import SourceError

    data = awkward_gguf.read_bytes()
    start = data.index(b"x" * 300)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: start + 100])  # inside the 300-byte string
    with pytest.raises(SourceError, match="truncated GGUF file"):
        GGUFHeader(str(cut))
