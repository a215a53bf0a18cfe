"""gguf int32 weight: written from the test fixtures by `make(tmp)`."""

import numpy as np
from gguf import GGMLQuantizationType as QT

from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf


def make(tmp):
    weight = np.zeros((128, 64), np.int32)  # ffn_up of block 0, [intermediate, hidden]
    return write_gguf(tmp / "model.gguf", tiny_arch(), raw={"blk.0.ffn_up.weight": (weight, QT.I32)})
