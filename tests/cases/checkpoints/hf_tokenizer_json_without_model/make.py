"""hf tokenizer json without model: written from the test fixtures by `make(tmp)`."""

from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint


def make(tmp):
    directory = write_hf_checkpoint(tmp / "ckpt", tiny_arch())
    (directory / "tokenizer.json").write_text('{"version": "1.0", "added_tokens": []}')
    return directory
