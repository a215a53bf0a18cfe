"""`mtpc verify DIR --spec SPEC`: run a package and compare it with the numpy reference.

The package does not record where its weights came from (it holds only what
its runtimes read), so `verify` takes the spec it was compiled from and
re-derives the weights from the spec's source. Steps, stopping at the first
that fails:

1. the static checks of `mtpc check DIR`;
2. onnxruntime: `model.onnx` on a prompt (prefill) and one more token (a step
   with the caches it returned), logits and the hidden state the head is
   seeded from, against `mtpc.reference.forward.DecoderReference`;
3. the MTP head graph named by `model.mtp.filename` on the same tokens, seeded
   with the reference's hidden state, against `MtpHeadReference`; likewise the
   onnx-genai head the speculator config names, fed the embedded tokens;
4. onnxruntime-genai: plain greedy decoding, then `og.MtpGenerator`
   speculative decoding from the head's own folder; the two token sequences
   must be identical. The draft acceptance rate is reported.

Paged packages (CUDA, packed `[N]` inputs) cannot run on CPU: only step 1, and
the verdict says so; that exits 2 (the package was not run), unless `--static-only`
asked for the static checks alone. A package with an MTP head checked against a spec whose
source ships none is the wrong spec: a failed check, not a note.
A runtime that refuses the package (a graph it cannot load or run) is a failed
check with the runtime's one-line reason, not a crash.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from typing import TYPE_CHECKING

from ..util.diagnostics import ExitCode, MtpcError
from .report import console, verb_parser, err, existing_dir, existing_file, out, print_json, whole_number

if TYPE_CHECKING:  # imported where they are used: every `mtpc` run builds this verb's parser (`mtpc --help` too)
    from .verify_steps import Report

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

DEFAULT_PROMPT = (1, 17, 42, 99, 5, 23)
MAX_DRAFT_TOKENS = 16  # onnxruntime-genai 0.18.0 accepts max_draft_tokens in 1..16


def add_parser(sub) -> None:
    p = verb_parser(sub, "verify", HELP, EPILOG)
    p.add_argument("package", metavar="DIR", help="the compiled package")
    p.add_argument("--spec", required=True, metavar="SPEC", help="the spec the package was compiled from")
    p.add_argument(
        "--prompt", type=token_ids, default=DEFAULT_PROMPT, metavar="IDS",
        help="comma-separated prompt token ids (default: a fixed short prompt)",
    )
    p.add_argument(
        "--new-tokens", type=whole_number(1), default=8, metavar="N",
        help="tokens to generate, at least 1; prompt plus N must fit the context length (default 8)",
    )
    p.add_argument(
        "--draft-tokens", type=whole_number(1, MAX_DRAFT_TOKENS), default=2, metavar="K",
        help=f"MTP draft tokens per step, 1 to {MAX_DRAFT_TOKENS} (default 2)",
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
    from ..checks import GENAI_CONFIG, check_package
    from .verify_runner import RuntimeRefused
    from ..tuning.package import is_paged
    from .verify_steps import Report

    root = package_root(args.package)
    spec = existing_file(args.spec, "spec")
    progress = console(args)
    prompt = args.prompt
    report = Report()

    progress("static checks")
    report.steps.append("static checks")
    findings = check_package(root)
    for f in findings:
        if f.blocking:
            report.agree("static", False, f.render())
        else:
            report.notes.append(f.render())
    if any(f.blocking for f in findings):
        return _finish(args, report)
    cfg_path = root / GENAI_CONFIG
    if not cfg_path.is_file():
        report.static_only = "no genai_config.json: nothing to run on onnxruntime"
        return _finish(args, report)
    cfg = json.loads(cfg_path.read_text("utf-8"))
    if is_paged(cfg):
        report.static_only = "paged packages cannot run on CPU"
        return _finish(args, report)
    if args.static_only:
        report.static_only = "--static-only: the package was not run"
        return _finish(args, report)
    context = (cfg.get("model") or {}).get("context_length")
    if isinstance(context, int) and len(prompt) + args.new_tokens > context:
        raise MtpcError.single(
            f"--new-tokens {args.new_tokens} with a {len(prompt)}-token prompt exceeds the package's context length ({context})",
            exit_code=ExitCode.USAGE,
            hint=f"use --new-tokens {context - len(prompt)} or less" if len(prompt) < context else "use a shorter --prompt",
        )
    try:
        _run_package(args, root, spec, cfg, prompt, report, progress)
    except RuntimeRefused as refused:
        report.agree("runtime", False, str(refused))
    return _finish(args, report)


def package_root(path: str) -> Path:
    """The package folder `verify` was given, refused (usage) when it is not a package root."""
    from ..checks import GENAI_CONFIG, is_runtime_package

    root = existing_dir(path, "package")
    if not is_runtime_package(root):
        raise MtpcError.single(
            f"{path!r} holds no genai_config.json or inference_metadata.yaml: not an mtpc package",
            exit_code=ExitCode.USAGE,
            hint="give the folder `mtpc compile` wrote (a checkpoint is the spec's source, not a package)",
        )
    config = root / GENAI_CONFIG
    if config.is_file():
        try:
            decoder = (json.loads(config.read_text("utf-8")).get("model") or {}).get("decoder") or {}
        except (ValueError, AttributeError):
            decoder = {}  # a malformed config is for the static checks to report
        if isinstance(decoder, dict) and "hidden_states" in (decoder.get("inputs") or {}):
            raise MtpcError.single(
                f"{path!r}: this is the MTP head's folder; pass the package root", exit_code=ExitCode.USAGE,
                hint=f"mtpc verify {root.resolve().parent} --spec ...",
            )
    return root




def _run_package(args, root: Path, spec: Path, cfg: dict, prompt, report: Report, progress) -> None:
    """Steps 2 to 4 of the module docstring, adding to `report`."""
    from ..tuning.run import require_runtime

    require_runtime("verify")
    from .. import sources
    from ..pipeline.driver import build_ir
    from .verify_steps import compare_package

    ir, info = build_ir(spec)
    from ..emit.provenance_record import package_mismatches

    report.provenance = package_mismatches(root, ir, spec)
    for message in report.provenance:  # said now: a wrong spec makes everything after it fail
        progress(f"warning: {message}")
    if max(prompt) >= ir.architecture.vocab_size:
        raise MtpcError.single(
            f"prompt token {max(prompt)} is outside the vocabulary ({ir.architecture.vocab_size})",
            exit_code=ExitCode.USAGE,
        )
    progress("reading weights for the reference")
    weights = sources.open_model_weights(ir, info)
    try:
        compare_package(args, root, cfg, prompt, report, progress, ir, weights)
    finally:
        weights.close()


def _verdict(report: Report, refused: bool) -> str:
    if report.ok:
        return "verify: ok" + (" (but see the provenance warnings above)" if report.provenance else "")
    if refused:
        return "verify: FAILED (a runtime refused the package)"
    if any(c["check"] == "static" and not c["ok"] for c in report.checks):
        return "verify: FAILED (the static checks, as `mtpc check` reports them)"
    if any("different spec" in m for m in report.provenance):
        return "verify: MISMATCH: the package was compiled from another spec (see the warnings; its spec is in provenance.json)"
    if any("source differs" in m for m in report.provenance):
        return "verify: MISMATCH: the package was compiled from another source checkpoint (see the warnings)"
    return "verify: MISMATCH"


# What to do about a package that could not be run here, said with the verdict.
NOT_RUN_HINT = ("pass --static-only to accept the static checks as the verdict, or run the package where its runtime "
                "is (for a paged package on a CUDA machine: tests/gpu/run_paged_check.py)")


def _finish(args, report: Report) -> int:
    from .verify_steps import acceptance_rate

    rate = acceptance_rate(report.stats)
    # Static checks alone pass a gate only when asked for: a package nothing ran is not a verified one.
    not_run = report.ok and report.static_only is not None and not args.static_only
    code = ExitCode.USAGE if not_run else ExitCode.OK if report.ok else ExitCode.FINDINGS
    if args.format == "json":
        extra = {"exit_code": int(code), "hint": NOT_RUN_HINT} if not_run else {}
        print_json(
            "verify",
            {
                **extra,
                "ok": code is ExitCode.OK,
                "checks": report.checks,
                "notes": report.notes,
                "steps": report.steps,
                "static_only": report.static_only,
                "greedy": report.greedy,
                "speculative": report.speculative,
                "reference_greedy": report.reference_greedy,
                "stats": report.stats,
                "acceptance_rate": rate,
                "provenance": report.provenance,
            },
        )
    else:
        for c in report.checks:
            mark = "ok  " if c["ok"] else "FAIL"
            if "max_abs_diff" in c:
                out(f"{mark} {c['check']}: max |diff| {c['max_abs_diff']:.3g} (bound {c['bound']:.3g})")
            else:
                out(f"{mark} {c['check']}: {c['detail']}")
        for note in report.notes:
            out(f"note: {note}")
        for message in report.provenance:
            out(f"warning: {message}")
        if report.greedy is not None:
            out(f"greedy tokens:      {report.greedy}")
        if report.speculative is not None:
            out(f"speculative tokens: {report.speculative}")
        if rate is not None:
            out(f"draft acceptance:   {rate:.0%} ({report.stats.get('draft_tokens_accepted')} of {report.stats.get('draft_tokens_evaluated') or report.stats.get('draft_tokens_proposed')})")
        refused = any(c["check"] == "runtime" and not c["ok"] for c in report.checks)
        if not_run:
            out(f"verify: NOT RUN ({report.static_only}); only the static checks passed")
            err(f"mtpc verify: the package was not run; {NOT_RUN_HINT}")
        elif report.ok and report.static_only:
            out(f"verify: static checks only ({report.static_only})")
        else:
            out(_verdict(report, refused))
    return int(code)
