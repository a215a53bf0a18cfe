"""Run llama.cpp's `convert_hf_to_gguf.py` on a tiny test checkpoint.

    python convert_wrapper.py LLAMA_CPP_DIR PRE_TOKENIZER -- ARGS... [-- ARGS...]

Each `--`-separated group of arguments is one run of the converter's `main()`,
in this one process (torch and transformers are imported once, which is most
of a tiny conversion's time); its class-level state is reset by the converter
at the start of each run.

The converter names the BPE pre-tokenizer (`tokenizer.ggml.pre`) by hashing
how the checkpoint's tokenizer encodes a fixed text, and knows only real
models' hashes (`TextModel.get_vocab_base_pre`); any other tokenizer is
refused. Our tiny byte-level tokenizers stand in for the real Qwen3.5 one, so
this wrapper answers with the name the converter gives that one (`qwen35`)
and otherwise runs the converter unchanged: same module, same `main()`.

One difference of environment is undone: the converter reads a checkpoint's
config through transformers' `AutoConfig` when transformers knows its
`model_type`, else config.json as written. llama.cpp pins transformers 4.57.6
for it (requirements/requirements-convert_hf_to_gguf.txt), which has no
`step3p5` config; the 5.24 this project tests against maps Step-3.5's legacy
keys (`num_attention_groups`, ...) away and the converter then fails on them.
For the model types in `UNKNOWN_TO_PINNED_TRANSFORMERS`, `AutoConfig` refuses,
as the pinned release does, and the converter reads config.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Model types transformers 4.57.6 (the converter's pinned release) does not know.
UNKNOWN_TO_PINNED_TRANSFORMERS = ("step3p5",)


class _PinnedAutoConfig:
    """transformers' AutoConfig, refusing the model types the converter's pinned release has no config for."""

    def __init__(self, auto_config):
        self._auto_config = auto_config

    def from_pretrained(self, path, *args, **kwargs):
        config = Path(path) / "config.json"
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type") if config.is_file() else None
        if model_type in UNKNOWN_TO_PINNED_TRANSFORMERS:
            raise ValueError(f"transformers 4.57.6 has no configuration for model_type {model_type!r}")
        return self._auto_config.from_pretrained(path, *args, **kwargs)


def main() -> None:
    tree, pre_tokenizer, *rest = sys.argv[1:]
    runs: list[list[str]] = []
    for argument in rest:
        if argument == "--":
            runs.append([])
        else:
            runs[-1].append(argument)
    sys.path.insert(0, str(Path(tree).resolve()))
    import convert_hf_to_gguf  # noqa: E402  (puts the tree's own gguf-py first on sys.path)
    from conversion import base  # noqa: E402
    from conversion.base import TextModel  # noqa: E402

    base.AutoConfig = _PinnedAutoConfig(base.AutoConfig)

    def get_vocab_base_pre(self, tokenizer) -> str:
        return pre_tokenizer

    TextModel.get_vocab_base_pre = get_vocab_base_pre
    for arguments in runs:
        sys.argv = [convert_hf_to_gguf.__file__, *arguments]
        convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
