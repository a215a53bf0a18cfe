"""Does a rerun of the recipe regenerate the committed checkpoint? Held-out loss of both folders, from their files.

    python -m tools.stdlib_mtp.check REGENERATED [--committed models/qwen35-stdlib-mtp] [--bound 0.02]

Each folder is loaded as saved (transformers' `Qwen3_5ForCausalLM.from_pretrained`, the head's
`mtp.*` from its safetensors) and scored on the held-out modules, tokenized by its own tokenizer,
exactly as the recipe scores them: the trunk's next-token loss and the head's loss at depths 1 and
2 (nats per token). Exit 0 when the regenerated trunk's held-out loss is within `--bound` (relative)
of the committed one's, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import corpus as corpus_mod
from .train import evaluate, token_stream, windows

COMMITTED = Path(__file__).resolve().parents[2] / "models" / "qwen35-stdlib-mtp"


def load(folder: Path):
    import torch
    from safetensors.torch import load_file
    from transformers import Qwen3_5ForCausalLM

    from .model import TrunkWithHead

    config = json.loads((folder / "config.json").read_text())
    model = TrunkWithHead.__new__(TrunkWithHead)
    torch.nn.Module.__init__(model)
    model.model = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.model.config._attn_implementation = "sdpa"
    from .model import MtpHead

    model.mtp = MtpHead(model.model.config)
    head = {k[len("mtp."):]: v.float() for k, v in load_file(folder / "model.safetensors").items() if k.startswith("mtp.")}
    model.mtp.load_state_dict(head, strict=True)
    return model.eval(), config


def held_out_loss(folder: Path, seq_len: int = 512, chain: int = 1) -> dict:
    import torch
    from tokenizers import Tokenizer

    torch.set_num_threads(1)
    model, _ = load(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    held = windows(token_stream(tok, corpus_mod.load().text("held_out")), seq_len + 1)
    return evaluate(model, held, chain)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("regenerated", type=Path)
    parser.add_argument("--committed", type=Path, default=COMMITTED)
    parser.add_argument("--bound", type=float, default=0.02)
    args = parser.parse_args(argv)
    ours, theirs = held_out_loss(args.committed), held_out_loss(args.regenerated)
    change = theirs["loss"] / ours["loss"] - 1
    for name, result in (("committed", ours), ("regenerated", theirs)):
        print(f"{name:12} held-out loss {result['loss']:.4f}, head depth 1 / 2: "
              f"{result['head_loss'][0]:.4f} / {result['head_loss'][1]:.4f}, "
              f"head agrees with the trunk at depth 1 / 2: {result['agree'][0]:.1%} / {result['agree'][1]:.1%}")
    verdict = "within" if abs(change) <= args.bound else "outside"
    print(f"regenerated / committed trunk loss: {change:+.2%} ({verdict} the {args.bound:.0%} bound)")
    return 0 if abs(change) <= args.bound else 1


if __name__ == "__main__":
    sys.exit(main())
