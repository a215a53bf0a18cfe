"""hf overlapping tensors: written from the test fixtures by `make(tmp)`."""

import json
import struct

from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint


def make(tmp):
    directory = write_hf_checkpoint(tmp / "ckpt", tiny_arch())
    path = directory / "model.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    _, second = sorted((e["data_offsets"][0], k) for k, e in header.items() if k != "__metadata__")[:2]
    begin, end = header[second[1]]["data_offsets"]
    header[second[1]]["data_offsets"] = [begin - 4, end - 4]  # reaches 4 bytes into the first tensor
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + n :])
    return directory
