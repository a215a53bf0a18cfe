"""hf huge header length: written from the test fixtures by `make(tmp)`."""

import struct

from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint


def make(tmp):
    directory = write_hf_checkpoint(tmp / "ckpt", tiny_arch())
    path = directory / "model.safetensors"
    raw = bytearray(path.read_bytes())
    raw[0:8] = struct.pack("<Q", 2**63)
    path.write_bytes(raw)
    return directory
