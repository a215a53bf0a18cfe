"""`mtpc tune DIR`: will MTP make this package decode faster on this machine, and with how many drafts?

The work is `mtpc.tuning.tune` (imported in `run`, so `mtpc --help` stays instant);
this module parses the arguments, points the recommendation at the spec when one is
given, and renders the result as text or as the JSON report `compile --tune-report` reads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .report import console, existing_file, out, print_json, verb_parser, whole_number

HELP = "measure a package on this machine and say how many MTP drafts per step decode fastest"
EPILOG = """\
Runs the package in onnxruntime-genai on this machine: decodes each prompt greedily,
finds where the MTP head's chained drafts are right (acceptance per draft position),
times every kind of decoding step in interleaved sweeps (a plain step; a main forward
over 1..N+1 tokens, as a verify or a replay after a rejection; a head forward; the
state snapshot and restore), then replays what og.MtpGenerator does per step for every
draft count N = 0 (MTP off) .. --max-draft and predicts its tokens per second.
It prints the table, the recommended N and the one spec line that sets it
(targets.onnxruntime_genai.max_draft_tokens: N, or mtp: {head: off} when no N is at
least 5 % faster than decoding without the head). Greedy decoding: every N gives the
same tokens, so only speed is at stake.

Prompts: --prompts FILE has one prompt a line (blank lines are skipped), encoded with
the package's tokenizer; without it, a built-in handful (code, a list, prose, a
question, a table). Acceptance depends on what is decoded: use your own prompts.
Draft counts: up to --max-draft (4 by default). A hybrid model's package whose
linear-attention state is windowed (W) drafts at most W - 1 tokens (W = 3 with the
default max_draft_tokens: 2), so tune prices no more than that; to price more,
compile the spec with max_draft_tokens: N first.
Timings are means of interleaved samples, so the numbers are what decoding takes
under the conditions tune ran in: run it as you deploy (same machine, --threads as
you will set them, nothing else running that will not run then). A busy machine makes
the numbers noisier; more --sweeps steadies them.

The JSON report (--format json) is what `mtpc compile SPEC --tune-report FILE` puts
in the package's model card. Without the runtime extra (onnxruntime,
onnxruntime-genai) tune says what to install and exits 2; a package it cannot run
here (paged, CUDA-only), a package without a head, or an unreadable prompts file
exits 2 too.

examples:
  mtpc tune out/qwen35-tiny-mtp
  mtpc tune pkg --prompts my-prompts.txt --threads 4
  mtpc tune pkg --spec spec.yaml                       # points at the spec line to change
  mtpc tune pkg --format json > tune.json && mtpc compile spec.yaml -o pkg --tune-report tune.json
"""



def add_parser(sub) -> None:
    p = verb_parser(sub, "tune", HELP, EPILOG)
    p.add_argument("package", metavar="DIR", help="the compiled package (with an MTP head, for onnxruntime-genai)")
    p.add_argument("--spec", metavar="SPEC", help="the spec it was compiled from: the recommendation points at its line")
    p.add_argument("--prompts", metavar="FILE", help="prompts to decode, one a line (default: a built-in handful)")
    p.add_argument("--max-draft", type=whole_number(1, 16), metavar="N",
                   help="largest draft count to predict, 1 to 16 (default: 4, or the package's own if larger; "
                        "at most W - 1 on a package with a state window W, as the runtime drafts no more)")
    p.add_argument("--new-tokens", type=whole_number(8), default=64, metavar="N", help="tokens to generate per prompt (default 64)")
    p.add_argument("--threads", type=whole_number(1), metavar="N",
                   help="intra-op threads for both models (default: the package's session options)")
    p.add_argument("--sweeps", type=whole_number(3), default=24, metavar="N",
                   help="interleaved timing sweeps; each times every kind of step once (default 24)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..tuning import tune
    from ..tuning.package import open_package
    from ..tuning.prompts import read_prompts

    say = console(args)
    open_package(args.package)  # a missing or unusable package is reported before anything else is read
    spec = _spec(args.spec) if args.spec else None
    prompts = names = source = None
    if args.prompts:
        lines = read_prompts(args.prompts)
        prompts, names = [text for _, text in lines], [f"{args.prompts}:{n}" for n, _ in lines]
        source = Path(args.prompts).name
    result = tune(
        args.package, prompts, prompts_source=source, prompt_names=names, max_draft=args.max_draft,
        new_tokens=args.new_tokens, threads=args.threads, sweeps=args.sweeps,
        spec_position=(lambda draft: _position(spec, draft)) if spec else (lambda draft: None), progress=say,
    )
    if spec is not None:
        _warn_other_spec(args, spec, say)
    if args.format == "json":
        from ..tuning.report import envelope, validate

        validate(envelope(result.body))
        print_json("tune", result.body, ok=True)
    else:
        _render(result, spec)
    return 0


def _spec(path: str):
    from ..spec.loader import load_spec

    existing_file(path, "spec")
    return load_spec(path)


_FIELD = {True: ("targets", "onnxruntime_genai", "max_draft_tokens"), False: ("mtp", "head")}


def _position(spec, draft: int) -> str:
    span = spec.span(_FIELD[bool(draft)], at="value")  # a field the spec does not write: its section's place
    return f"{span.file}:{span.line}:{span.col}"


def _warn_other_spec(args, spec, say) -> None:
    try:
        recorded = json.loads((Path(args.package) / "provenance.json").read_text("utf-8"))["spec"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if recorded != hashlib.sha256(Path(args.spec).read_bytes()).hexdigest():
        say(f"note: the package was compiled from another text than {args.spec} (provenance.json says so); "
            "the line to change is still the one shown")


def _render(result, spec) -> None:
    body = result.body
    runtime, prompts, costs = body["runtime"], body["prompts"], body["step_costs_ms"]
    threads = (f"{runtime['threads']} thread{'s' if runtime['threads'] > 1 else ''}" if runtime["threads"]
               else "the package's threads")
    out(f"tune: {body['package']['path']} on {runtime['cpu']}, {threads}, onnxruntime-genai {runtime['onnxruntime_genai']}")
    source = "built-in prompts" if prompts["source"] == "built-in" else f"prompts from {prompts['source']}"
    out(f"      {prompts['count']} {source}, {prompts['generated_tokens']} generated tokens")
    out("")
    out("draft acceptance (where the drafts before it were right):")
    for k, (tried, kept) in enumerate(result.acceptance, 1):
        rate = f"{kept / tried:4.0%}" if tried else "   -"
        out(f"  draft {k}: {rate} ({kept} of {tried})")
    from ..tuning.package import draft_note

    note = draft_note(Path(body["package"]["path"]))
    if note:
        out(f"  drafts: {note}")
    out("")
    out(f"step costs, wall-clock ms (means of {costs['samples']} interleaved sweeps; CPU times in --format json):")
    widths = f"1..{len(costs['verify'])} tokens:"
    out(f"  plain step {costs['plain_step']:.3g}; snapshot {costs['snapshot']:.3g}, restore {costs['restore']:.3g}, "
        f"chained head forward {costs['head_chain']:.3g}")
    for name, key in (("verify", "verify"), ("replay", "replay"), ("head's first forward", "head_forward")):
        out(f"  {name} of {widths} " + " ".join(f"{c:.3g}" for c in costs[key]))
    out("")
    out("  drafts   tokens/s   vs off   tok/CPU-s   accepted   main fwd   head fwd")
    for p in result.predictions:
        name = "0 (off)" if p.draft == 0 else str(p.draft)
        mark = "*" if p.draft == result.recommended else " "
        accepted = f"{p.acceptance_rate:6.0%}" if p.acceptance_rate is not None else "     -"
        out(f"{mark} {name:<7} {p.tokens_per_second:9.4g}   {p.speedup:5.2f}x   {p.tokens_per_cpu_second:9.4g}     "
            f"{accepted}   {p.target_forwards:8d}   {p.draft_forwards:8d}")
    out("")
    recommendation = body["recommendation"]
    out(f"recommended: {f'N = {result.recommended} drafts per step' if result.recommended else 'MTP off'} ({result.reason})")
    current = body["package"]["max_draft_tokens"]
    if result.recommended and current == result.recommended:
        out(f"  the package already drafts {current}: nothing to change")
        return
    where = f"   # {recommendation['spec_position']}" if recommendation.get("spec_position") else ""
    if where and spec.get(_FIELD[bool(result.recommended)]) is None:
        where += " (not written there yet: add it in that section)"
    out(f"  spec: {recommendation['spec_line']}{where}")
    if result.recommended and current:
        out(f"  (the package drafts {current} now)")
    elif not result.recommended:
        out("  (or keep the package and decode with og.Generator, which never runs the head)")
