"""`mtpc verify DIR --spec SPEC`: the arguments of `mtpc.verification.verify` and the rendering of its result.

What verify runs and how it decides is `mtpc.verification`'s docstring; this module only parses, calls it and
prints the result (text or JSON) with its exit code.
"""

from __future__ import annotations

import argparse
import math

from ..util.decoding_defaults import MAX_DRAFT_TOKENS, VERIFY_DRAFT_TOKENS, VERIFY_NEW_TOKENS, VERIFY_PROMPT
from .report import console, verb_parser, err, out, print_json, whole_number

# The verification itself is imported in `run`: every `mtpc` run builds this verb's parser (`mtpc --help` too).

HELP = "run a package on CPU and compare it with the numpy reference and greedy decoding"
EPILOG = """\
Give the spec the package was compiled from: the weights are re-derived from the
spec's source for the reference. The package records no build-machine paths, but
its provenance.json holds that spec's text and hash and the source's fingerprint;
verify compares them first and warns when the spec or the checkpoint differs (and
a MISMATCH then says it is the wrong spec, not a broken package).
Tolerances follow the build (override with --atol, relative to the largest
reference value): float32 graphs must match the reference closely and decode
the same greedy tokens; float16 I/O gets a looser bound. For a quantized build
the reference uses the weights as the package stores them (quantized, then
dequantized), so the bound is that of its I/O dtype: it covers the runtime's
arithmetic, not the rounding of the weights. Only MatMulNBits with accuracy_level > 0
(rounding activations to int8 or float16; on CPU that is the default, 4) gets a looser bound.

A package that cannot run here (a paged one, CUDA-only, on this CPU-only
verify; or one without genai_config.json) gets its static checks and exits 2:
nothing ran, so nothing was verified. --static-only makes the static checks the
verdict (exit 0 when they pass), for any package. Without the runtime extra
(onnxruntime, onnxruntime-genai) verify says what to install and exits 2.

examples:
  mtpc verify out/qwen35-tiny-mtp --spec specs/qwen35-tiny-mtp.yaml
  mtpc verify out/paged --spec specs/qwen35-tiny-paged.yaml --static-only   # CUDA-only: check, do not run
  mtpc verify pkg --spec spec.yaml --prompt 1,17,42,99 --new-tokens 16 --draft-tokens 3
  mtpc verify pkg --spec spec.yaml --format json | jq .acceptance_rate
"""



def add_parser(sub) -> None:
    p = verb_parser(sub, "verify", HELP, EPILOG)
    p.add_argument("package", metavar="DIR", help="the compiled package")
    p.add_argument("--spec", required=True, metavar="SPEC", help="the spec the package was compiled from")
    p.add_argument(
        "--prompt", type=token_ids, default=VERIFY_PROMPT, metavar="IDS",
        help="comma-separated prompt token ids (default: a fixed short prompt)",
    )
    p.add_argument(
        "--new-tokens", type=whole_number(1), default=VERIFY_NEW_TOKENS, metavar="N",
        help=f"tokens to generate, at least 1; prompt plus N must fit the context length (default {VERIFY_NEW_TOKENS})",
    )
    p.add_argument(
        "--draft-tokens", type=whole_number(1, MAX_DRAFT_TOKENS), default=VERIFY_DRAFT_TOKENS, metavar="K",
        help=f"MTP draft tokens per step, 1 to {MAX_DRAFT_TOKENS} (default {VERIFY_DRAFT_TOKENS})",
    )
    p.add_argument(
        "--atol", type=tolerance_value, metavar="X",
        help="allowed deviation (>= 0), relative to the largest reference value",
    )
    p.add_argument(
        "--static-only", action="store_true",
        help="run only the static checks (those of `mtpc check`) and accept them as the verdict; without it, a "
        "package that cannot run here (paged, CUDA-only) exits 2 after its static checks, so a gate cannot pass untested",
    )
    p.set_defaults(run=run)


def tolerance_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def token_ids(text: str) -> tuple[int, ...]:
    parts = [t.strip() for t in text.split(",")]
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give at least one token id (or leave --prompt out for the default)")
    try:
        ids = tuple(int(t) for t in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of token ids") from None
    if min(ids) < 0:
        raise argparse.ArgumentTypeError(f"token ids cannot be negative, got {min(ids)}")
    return ids


def run(args) -> int:
    from ..verification import NOT_RUN_HINT, verify

    result = verify(args.package, args.spec, prompt=args.prompt, new_tokens=args.new_tokens, draft_tokens=args.draft_tokens,
                    atol=args.atol, static_only=args.static_only, progress=console(args))
    if args.format == "json":
        print_json("verify", result.to_json())
        return result.exit_code
    for c in result.checks:
        mark = "ok  " if c["ok"] else "FAIL"
        if "max_abs_diff" in c:
            out(f"{mark} {c['check']}: max |diff| {c['max_abs_diff']:.3g} (bound {c['bound']:.3g})")
        else:
            out(f"{mark} {c['check']}: {c['detail']}")
    for note in result.notes:
        out(f"note: {note}")
    for message in result.provenance:
        out(f"warning: {message}")
    if result.greedy is not None:
        out(f"greedy tokens:      {list(result.greedy)}")
    if result.speculative is not None:
        out(f"speculative tokens: {list(result.speculative)}")
    rate, stats = result.acceptance_rate, result.stats or {}
    if rate is not None:
        tried = stats.get("draft_tokens_evaluated") or stats.get("draft_tokens_proposed")
        out(f"draft acceptance:   {rate:.0%} ({stats.get('draft_tokens_accepted')} of {tried})")
    out(result.verdict)
    if result.not_run:
        err(f"mtpc verify: the package was not run; {NOT_RUN_HINT}")
    return result.exit_code
