"""gguf unknown version: written from the test fixtures by `make(tmp)`."""

import struct

from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf


def make(tmp):
    path = write_gguf(tmp / "model.gguf", tiny_arch())
    raw = bytearray(path.read_bytes())
    raw[4:8] = struct.pack("<I", 7)  # the version field
    path.write_bytes(raw)
    return path
