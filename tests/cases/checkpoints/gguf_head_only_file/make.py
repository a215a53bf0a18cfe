"""gguf head-only file (llama.cpp's `--mtp` output) named as the model: written from the test fixtures by `make(tmp)`."""

from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf
from tests.fixtures.two_file_gguf import split


def make(tmp):
    one = write_gguf(tmp / "one.gguf", tiny_arch())
    _, head = split(one, tmp / "Tiny-F32.gguf", tmp / "mtp-Tiny-F32.gguf")
    return head
