"""Does speculative decoding keep greedy's tokens at int4 with int8 activations? On the trained model, held-out prompts.

    .venv/bin/python bench/trained_exactness.py [--prompts 40] [--new-tokens 64] [--drafts 1,2,3,4]
                                                [--variants default,window,acc0] [--work DIR] [--json FILE]

mtpc's CPU int4 default (`{bits: 4, block_size: 32}`: MatMulNBits at accuracy level 4, int8
activations; `state_window: auto` leaves it unwindowed) compiled from models/qwen35-stdlib-mtp;
each held-out prompt (bench/trained_model.py) decoded `--new-tokens` tokens plainly (`og.Generator`)
and with `og.MtpGenerator` at N drafts. A verify forward over N + 1 rows computes with other int8
activation scales than N + 1 one-row steps, so where greedy's top two logits nearly tie the
speculative run can keep the other token. The table counts the prompts whose speculative tokens
equal greedy's, and for the others gives the plain run's gap between its top two logits at the
first token that differs (from the plain package's own logits there: `og.Generator.get_logits`),
which says how near the tie was. Variants: `window` is the same package with `state_window: 5`
(a crop keeps the verify's wide-forward token), `acc0` with float activations (`accuracy_level: 0`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trained_model import compile_package, prompts  # noqa: E402

TARGET = "targets:\n  onnxruntime_genai: {{execution_provider: cpu, max_draft_tokens: 4{window}}}\n"
VARIANTS = {
    "default": "quantization:\n  default: {bits: 4, block_size: 32}\n" + TARGET.format(window=""),
    "window": "quantization:\n  default: {bits: 4, block_size: 32}\n" + TARGET.format(window=", state_window: 5"),
    "acc0": "quantization:\n  default: {bits: 4, block_size: 32, accuracy_level: 0}\n" + TARGET.format(window=""),
}


def gap_at(runtime, prompt: list[int], greedy: list[int], index: int, other: int) -> tuple[float, float]:
    """(top-1 minus top-2 logit, top-1 minus the other run's token's logit) of plain decoding at `index`."""
    import numpy as np

    generator = runtime.generator(runtime.main, len(prompt) + index + 1)
    generator.append_tokens(prompt + greedy[:index])
    logits = np.asarray(generator.get_logits()[0, -1], np.float64)
    top = np.sort(logits)[::-1]
    return float(top[0] - top[1]), float(top[0] - logits[other])


def measure(package: Path, chosen, new_tokens: int, drafts: list[int]) -> dict:
    from mtpc.tuning.decode import decode
    from mtpc.tuning.package import open_package
    from mtpc.tuning.runtime import Runtime

    runtime = Runtime(open_package(package, needs_tokenizer=False), 1)
    out = {}
    for n in drafts:
        equal, gaps = 0, []
        for _, ids in chosen:
            greedy = list(decode(runtime, ids, new_tokens).tokens)
            spec = list(decode(runtime, ids, new_tokens, n).tokens)
            if spec == greedy:
                equal += 1
                continue
            index = next(i for i, (a, b) in enumerate(zip(spec, greedy)) if a != b)
            gaps.append((index, *gap_at(runtime, ids, greedy, index, spec[index])))
        out[n] = {"equal": equal, "prompts": len(chosen), "divergences": gaps}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--drafts", default="1,2,3,4")
    parser.add_argument("--variants", default="default,window,acc0")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="mtpc-trained-"))
    chosen = prompts(args.prompts)
    drafts = [int(n) for n in args.drafts.split(",")]
    results = {}
    lines = ["| int4 package | N | speculative == greedy | first divergence (token index) | top-2 gap there, median (max) |",
             "|---|---:|---:|---|---|"]
    for variant in args.variants.split(","):
        package = compile_package(work, f"int4-{variant}", VARIANTS[variant])
        results[variant] = measure(package, chosen, args.new_tokens, drafts)
        for n, r in results[variant].items():
            gaps = r["divergences"]
            where = ", ".join(str(i) for i, _, _ in gaps) or "-"
            gap = f"{median(g for _, g, _ in gaps):.3f} ({max(g for _, g, _ in gaps):.3f})" if gaps else "-"
            lines.append(f"| {variant} | {n} | {r['equal']} / {r['prompts']} ({r['equal'] / r['prompts']:.0%}) | "
                         f"{where} | {gap} |")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
