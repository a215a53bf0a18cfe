"""The header walk steps over long string arrays by runs (one regular-expression match per run of short
strings) and lands exactly where stepping one string at a time lands, or fails where it fails.

The reference here is the format itself: a u64 little-endian length, then that many bytes.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from gguf import GGUFWriter

from mtpc.sources.gguf import header as gguf_header
from mtpc.sources.gguf.header import GGUFHeader, _Truncated, skip_strings

RUN, FROM = gguf_header._RUN, gguf_header._REGEX_FROM


def _reference_end(buf: bytes, start: int, count: int) -> int | None:
    """Where `count` strings from `start` end, or None when the buffer ends first."""
    pos = start
    for _ in range(count):
        if pos + 8 > len(buf):
            return None
        pos += 8 + int.from_bytes(buf[pos : pos + 8], "little")
    return pos if pos <= len(buf) else None


# Bytes that look like length prefixes and regex syntax, so nothing inside a string is mistaken for one.
_BLOB = bytes(random.Random(0).choices(b"\x00\x01\x07.*\n\xff(\\a", k=1 << 17))


def _strings(rng: random.Random, count: int, long_every: int | None) -> list[bytes]:
    out = []
    for _ in range(count):
        if long_every and rng.randrange(long_every) == 0:
            length = rng.choice((255, 256, 257, 300, 4096)) if rng.randrange(50) else 70000
        else:
            length = rng.choice((0, 1, 2, 3, 5, 8, 13, 40, 64, 127, 128, 200, 254, 255))
        start = rng.randrange(len(_BLOB) - length)
        out.append(_BLOB[start : start + length])
    return out


def _encode(strings: list[bytes]) -> bytes:
    return b"".join(struct.pack("<Q", len(s)) + s for s in strings)


@pytest.mark.parametrize("count", [0, 1, RUN - 1, RUN, FROM - 1, FROM, FROM + 1, FROM + RUN + 17, 3 * FROM + 5])
@pytest.mark.parametrize("long_every", [None, 5000, 300, 7])
def test_runs_land_where_stepping_lands(count, long_every):
    rng = random.Random(count * 7 + (long_every or 0))
    prefix = b"\x09" * rng.randrange(0, 20)
    body = _encode(_strings(rng, count, long_every))
    buf = prefix + body + b"\x05\x00\x00\x00\x00\x00\x00\x00tail!"  # what follows looks like one more string
    assert skip_strings(memoryview(buf), len(prefix), count) == len(prefix) + len(body) == _reference_end(buf, len(prefix), count)


@pytest.mark.parametrize("long_every", [None, 200])
def test_a_cut_array_is_truncated_wherever_it_is_cut(long_every):
    rng = random.Random(long_every or 1)
    count = FROM + 2 * RUN + 3
    body = _encode(_strings(rng, count, long_every))
    cuts = sorted(rng.sample(range(len(body)), 60)) + [len(body) - 1, len(body) - 8, 8, 1]
    for cut in cuts:
        buf = memoryview(body[:cut])
        assert _reference_end(body[:cut], 0, count) is None
        with pytest.raises(_Truncated):
            skip_strings(buf, 0, count)


def test_a_length_past_the_file_in_the_middle_of_a_run_is_truncated():
    strings = [b"ab"] * (FROM + RUN)
    body = bytearray(_encode(strings))
    body[10 * 10 : 10 * 10 + 8] = struct.pack("<Q", 2**63)  # the 11th string claims 2^63 bytes
    with pytest.raises(_Truncated):
        skip_strings(memoryview(bytes(body)), 0, len(strings))


def test_a_long_vocabulary_is_read_back_as_written(tmp_path):
    rng = random.Random(5)
    tokens = [s.decode("latin-1") for s in _strings(rng, FROM + 3 * RUN + 11, 500)]
    path = tmp_path / "v.gguf"
    w = GGUFWriter(str(path), arch="qwen35")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_uint32("after.the.array", 7)
    w.add_tensor("a.weight", np.zeros((2, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    header = GGUFHeader(str(path))
    assert list(header.metadata["tokenizer.ggml.tokens"]) == tokens
    assert header.metadata["after.the.array"] == 7
    assert list(header.tensors) == ["a.weight"]


def test_runs_of_short_strings_of_any_bytes_are_matched_whole(monkeypatch):
    """Only the tail (and a run holding a string of 256 bytes or more) is stepped one string at a time."""
    stepped = []
    real = gguf_header._step
    monkeypatch.setattr(gguf_header, "_step", lambda buf, pos, count: stepped.append(count) or real(buf, pos, count))
    every_byte = [bytes([b]) * (b % 256) for b in range(256)] + [bytes(range(256))[:255], b"\n" * 3, b""]
    strings = (every_byte * ((FROM + RUN) // len(every_byte) + 1))[: FROM + RUN + 5]
    buf = memoryview(_encode(strings))
    assert skip_strings(buf, 0, len(strings)) == len(buf)
    assert stepped == [5]
    stepped.clear()
    strings[RUN + 3] = b"x" * 256  # in the second run
    longer = _encode(strings)
    assert skip_strings(memoryview(longer), 0, len(strings)) == len(longer)
    assert stepped == [RUN, 5]
