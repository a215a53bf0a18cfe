"""gguf misaligned tensor: written from the test fixtures by `make(tmp)`."""

import struct

from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf


def make(tmp):
    path = write_gguf(tmp / "model.gguf", tiny_arch())
    raw = bytearray(path.read_bytes())
    name = b"blk.0.attn_norm.weight"
    at = raw.find(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    at += 4 + 8 + 4  # n_dims (1), ne[0], type: the data offset follows
    (offset,) = struct.unpack_from("<Q", raw, at)
    raw[at : at + 8] = struct.pack("<Q", offset + 4)
    path.write_bytes(raw)
    return path
