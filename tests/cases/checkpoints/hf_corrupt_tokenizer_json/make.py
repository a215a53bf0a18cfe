"""hf corrupt tokenizer json: written from the test fixtures by `make(tmp)`."""

from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint


def make(tmp):
    directory = write_hf_checkpoint(tmp / "ckpt", tiny_arch())
    (directory / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": ')  # cut short
    return directory
