"""gguf huge array count: written from the test fixtures by `make(tmp)`."""

import struct

from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf


def make(tmp):
    path = write_gguf(tmp / "model.gguf", tiny_arch(vocab_size=272), tokenizer=True)
    raw = bytearray(path.read_bytes())
    at = raw.find(b"tokenizer.ggml.tokens") + len(b"tokenizer.ggml.tokens") + 8  # past the type and element type
    raw[at : at + 8] = struct.pack("<Q", 2**60)  # the array's element count
    path.write_bytes(raw)
    return path
