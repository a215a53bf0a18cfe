"""Acceptance at each draft position of a checkpoint's chained MTP layers: the package's chain against the checkpoint's.

    python bench/chained_heads.py [--steps 30] [--drafts 3]

The tiny Step-3.5 release of tests/fixtures/step35_checkpoints.py (three MTP layers, each fitted to other steps of
the greedy continuations), decoded greedily with `--drafts` drafts a round over its two prompts:

- `package`: og.MtpGenerator on mtpc's package (the first MTP layer at every position), and its numpy rendition;
- `reference`: the numpy rendition of the checkpoint's chain (layer k at position k: vLLM's `spec_step_idx`);
- `llama.cpp`: `llama-speculative-simple --spec-type draft-mtp` on llama.cpp's converter's f32 file of the same
  release (its chained `nextn_layer_offset` heads), its rounds from its debug log after its first round (which
  drafts from the prompt's last token, before the first generated one).

Per position k: the rounds that reached it (every earlier draft accepted) and of those, the accepted ones.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _positions(rounds: list[tuple[int, int]], depth: int) -> list[tuple[int, int]]:
    from tests.fixtures.chained_heads import Rounds

    return Rounds([], rounds).at_position(depth)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--drafts", type=int, default=3)
    args = parser.parse_args(argv)

    from mtpc.reference.forward import DecoderReference
    from tests.clients import llama_cpp, llama_cpp_runtime
    from tests.fixtures.chained_heads import chain, simulate_chain
    from tests.fixtures.glm4moe_checkpoints import prompt_bytes
    from tests.fixtures.step35_checkpoints import PROMPTS, fitted_step_store, tiny_step_arch, write_step_checkpoint
    from tests.runtime import decoding
    from tests.runtime.conftest import compile_spec, write_spec

    arch = tiny_step_arch()
    store = fitted_step_store(arch)
    main_ref, heads = DecoderReference(arch, store), chain(arch, store)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        release = write_step_checkpoint(work / "release", arch)
        package = compile_spec(write_spec(work / "step.yaml", "step", "{hf: release}"), work / "pkg")
        gguf = llama_cpp.convert(release, {"f32": work / "step-f32.gguf"}, pre_tokenizer="glm4")["f32"]
        models = decoding.load(package), decoding.load(package / "mtp")
        totals: dict[str, list[tuple[int, int]]] = {"package": [], "reference": [], "llama.cpp": []}
        for prompt in PROMPTS:
            first = simulate_chain(main_ref, heads[:1], list(prompt), args.steps, args.drafts)
            run = decoding.speculative(*models, list(prompt), args.steps, args.drafts)
            assert run.tokens == first.tokens and run.accepted == sum(a for _, a in first.rounds)
            totals["package"] += first.rounds  # og's tokens and counters are its rendition's (asserted above)
            totals["reference"] += simulate_chain(main_ref, heads, list(prompt), args.steps, args.drafts).rounds
            log = llama_cpp_runtime.speculative(gguf, prompt_bytes(prompt), args.steps, args.drafts, work).log
            totals["llama.cpp"] += [(int(n), int(a)) for a, n in re.findall(r"accepted (\d+)/(\d+) draft", log)][1:]
    print(f"| chain | rounds | " + " | ".join(f"position {k}" for k in range(1, args.drafts + 1)) + " |")
    print("|---|---:|" + "---:|" * args.drafts)
    for name, rounds in totals.items():
        cells = [f"{kept}/{reached} ({kept / reached:.0%})" if reached else "-" for reached, kept in
                 _positions(rounds, args.drafts)]
        print(f"| {name} | {len(rounds)} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
