"""Hugging Face transformers' own Qwen3.5 as the reference: greedy tokens of an HF checkpoint folder.

The folder is what `tests.fixtures.checkpoints.write_hf_checkpoint` writes: a
`Qwen3_5ForConditionalGeneration` config with the text model under
`text_config`, weights under `model.language_model.*`, `lm_head.*` and `mtp.*`;
or a `Qwen3_5ForCausalLM` folder (the text config at the top, weights under
`model.*`), as the checkpoint trained here is saved.
The text model is built as `Qwen3_5ForCausalLM` from `text_config` (the
multimodal class would add a vision tower of random weights), and its weights
are loaded strictly under transformers' names: every weight of the text model
must be in the file. transformers has no MTP head, so `mtp.*` is left out. CPU,
float32, eager attention, and no cache: each step runs the whole sequence.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

_TEXT_PREFIX = "model.language_model."


def load(hf_dir: Path) -> Qwen3_5ForCausalLM:
    doc = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    text = doc.get("text_config", doc)  # Qwen3_5ForCausalLM's own config.json is the text config
    config = Qwen3_5TextConfig(**text)
    config._attn_implementation = "eager"
    model = Qwen3_5ForCausalLM(config).to(torch.float32).eval()
    state = {}
    for path in sorted(hf_dir.glob("*.safetensors")):
        for name, value in load_file(path).items():
            if name.startswith("mtp."):
                continue
            if name.startswith(_TEXT_PREFIX):
                name = "model." + name.removeprefix(_TEXT_PREFIX)
            state[name] = value
    model.load_state_dict(state, strict=True)
    return model


@torch.no_grad()
def greedy(model: Qwen3_5ForCausalLM, prompt: list[int], steps: int) -> list[int]:
    # One intra-op thread: for a model this small, torch's thread pool only adds waiting, and on a
    # busy 2-core machine a forward pass went from ~0.02 s to over 1 s with the default two.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ids = list(prompt)
        for _ in range(steps):
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits
            ids.append(int(logits[0, -1].argmax()))
        return ids[len(prompt) :]
    finally:
        torch.set_num_threads(threads)
