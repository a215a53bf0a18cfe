"""gguf block count is a string: written from the test fixtures by `make(tmp)`."""

from gguf import GGUFWriter

from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf


def make(tmp, monkeypatch):
    monkeypatch.setattr(GGUFWriter, "add_block_count", lambda self, n: self.add_string("qwen35.block_count", "four"))
    return write_gguf(tmp / "model.gguf", tiny_arch())
