"""Write the trained model as a Hugging Face folder: config, generation config, one safetensors file.

The trunk's tensors are `Qwen3_5ForCausalLM`'s own (`model.*`, `lm_head.weight`), the head's are
the release's `mtp.*`, all stored as bfloat16 (as Qwen's releases are; it also keeps the folder
under the repository's 16 MB). transformers' `Qwen3_5ForCausalLM.from_pretrained` loads the folder
and skips `mtp.*`, as it does for the release.
"""

from __future__ import annotations

import json
from pathlib import Path


def save(model, out: Path, tok_config: dict) -> None:
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    lm = model.model
    lm.config.save_pretrained(out)
    generation = {"bos_token_id": tok_config["eos"], "eos_token_id": tok_config["eos"],
                  "pad_token_id": tok_config["eos"], "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in lm.state_dict().items()}
    tensors.update({"mtp." + k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.mtp.state_dict().items()})
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
