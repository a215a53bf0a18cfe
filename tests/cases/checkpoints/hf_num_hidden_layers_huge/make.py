"""hf num hidden layers huge: written from the test fixtures by `make(tmp)`."""

import json

from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint


def make(tmp):
    directory = write_hf_checkpoint(tmp / "ckpt", tiny_arch())
    config = json.loads((directory / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 10**12
    config["text_config"].pop("layer_types")
    (directory / "config.json").write_text(json.dumps(config))
    return directory
