"""hf shape contradicts config: written from the test fixtures by `make(tmp)`."""

import numpy as np

from mtpc.sources.random_weights import raw_hf_tensors
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.safetensors_writer import write_safetensors


def make(tmp):
    arch = tiny_arch()
    directory = write_hf_checkpoint(tmp / "ckpt", arch)
    tensors = raw_hf_tensors(arch, 0)
    tensors["model.language_model.layers.2.linear_attn.dt_bias"] = np.zeros(5, np.float32)
    write_safetensors(directory / "model.safetensors", tensors)
    return directory
