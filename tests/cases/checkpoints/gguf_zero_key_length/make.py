"""gguf zero key length: written from the test fixtures by `make(tmp)`."""

from gguf import GGUFWriter

from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf


def make(tmp, monkeypatch):
    # head_dim divides the rotary width: zero was a ZeroDivisionError (exit 3)
    monkeypatch.setattr(GGUFWriter, "add_key_length", lambda self, n: self.add_uint32("qwen35.attention.key_length", 0))
    return write_gguf(tmp / "model.gguf", tiny_arch())
