"""`verify`: the steps of `mtpc verify` in order, gathered into a `VerifyResult` (see the package's docstring).

What stops verify before it has a result (a folder that is not a package, a spec that does not exist, a prompt
the package cannot take, a missing runtime extra) raises `MtpcError` with exit code 2, as the command exits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..util.decoding_defaults import (
    MAX_DRAFT_TOKENS, VERIFY_DRAFT_TOKENS, VERIFY_NEW_TOKENS, VERIFY_PROMPT,
)
from ..util.diagnostics import ExitCode, MtpcError
from ..util.user_files import existing_dir, existing_file
from .steps import Report, acceptance_rate

DEFAULT_PROMPT, DEFAULT_NEW_TOKENS, DEFAULT_DRAFT_TOKENS = VERIFY_PROMPT, VERIFY_NEW_TOKENS, VERIFY_DRAFT_TOKENS

# What to do about a package that could not be run here, said with the verdict.
NOT_RUN_HINT = ("pass --static-only to accept the static checks as the verdict, or run the package where its runtime "
                "is (for a paged package on a CUDA machine: tests/gpu/run_paged_check.py)")


@dataclass(frozen=True)
class Options:
    """What a verify run is asked: the steps read `new_tokens`, `draft_tokens` and `atol`."""

    prompt: tuple[int, ...] = DEFAULT_PROMPT
    new_tokens: int = DEFAULT_NEW_TOKENS
    draft_tokens: int = DEFAULT_DRAFT_TOKENS
    atol: float | None = None
    static_only: bool = False


@dataclass(frozen=True)
class VerifyResult:
    """A package verified against its spec: every comparison (`checks`, each a dict with `check`, `ok` and either
    `max_abs_diff` and `bound` or `detail`), what ran (`steps`), the tokens decoded and onnxruntime-genai's counters,
    and the exit code `mtpc verify` gives for it (0 verified, 1 a mismatch or a failed check, 2 not run here)."""

    package: Path
    exit_code: int
    verdict: str  # the command's last line of text output
    checks: tuple[dict, ...]
    notes: tuple[str, ...]
    steps: tuple[str, ...]
    static_only: str | None  # why only the static checks were done, when they were
    greedy: tuple[int, ...] | None
    speculative: tuple[int, ...] | None
    reference_greedy: tuple[int, ...] | None
    stats: dict | None  # og.MtpGenerator's counters (draft_tokens_proposed, draft_tokens_accepted, ...)
    provenance: tuple[str, ...]  # how provenance.json disagrees with the spec given

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    @property
    def not_run(self) -> bool:
        """Only the static checks ran, and they passed, without `static_only` asking for that alone."""
        return self.exit_code == ExitCode.USAGE

    @property
    def acceptance_rate(self) -> float | None:
        """Drafts the main model accepted, of those the head proposed; None when nothing was drafted."""
        return acceptance_rate(self.stats)

    def to_json(self) -> dict:
        """The body of `mtpc verify --format json`."""
        extra = {"exit_code": self.exit_code, "hint": NOT_RUN_HINT} if self.not_run else {}
        listed = lambda tokens: None if tokens is None else list(tokens)  # noqa: E731
        return {
            **extra, "ok": self.ok, "checks": list(self.checks), "notes": list(self.notes), "steps": list(self.steps),
            "static_only": self.static_only, "greedy": listed(self.greedy), "speculative": listed(self.speculative),
            "reference_greedy": listed(self.reference_greedy), "stats": self.stats,
            "acceptance_rate": self.acceptance_rate, "provenance": list(self.provenance),
        }


def verify(
    package: str | Path,
    spec: str | Path,
    *,
    prompt: Sequence[int] = DEFAULT_PROMPT,
    new_tokens: int = DEFAULT_NEW_TOKENS,
    draft_tokens: int = DEFAULT_DRAFT_TOKENS,
    atol: float | None = None,
    static_only: bool = False,
    progress: Callable[[str], None] | None = None,
) -> VerifyResult:
    """Run `package` on CPU against the numpy reference of `spec`'s source, as `mtpc verify` does."""
    options = _options(prompt, new_tokens, draft_tokens, atol, static_only)
    from ..checks import GENAI_CONFIG, check_package
    from ..checks.vision import text_view_document
    from ..tuning.package import is_paged
    from .runner import RuntimeRefused

    root = package_root(package)
    spec_path = existing_file(spec, "spec")
    progress = progress or (lambda message: None)
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
        return _result(root, options, report)
    cfg_path = root / GENAI_CONFIG
    if not cfg_path.is_file():
        report.static_only = "no genai_config.json: nothing to run on onnxruntime"
        return _result(root, options, report)
    cfg = json.loads(cfg_path.read_text("utf-8"))
    cfg = text_view_document(root, cfg)  # a multimodal package: its text decoder is what the head drafts for
    if is_paged(cfg):
        report.static_only = "paged packages cannot run on CPU"
        return _result(root, options, report)
    if options.static_only:
        report.static_only = "--static-only: the package was not run"
        return _result(root, options, report)
    context = (cfg.get("model") or {}).get("context_length")
    prompt = options.prompt
    if isinstance(context, int) and len(prompt) + options.new_tokens > context:
        raise MtpcError.single(
            f"--new-tokens {options.new_tokens} with a {len(prompt)}-token prompt exceeds the package's context length ({context})",
            exit_code=ExitCode.USAGE,
            hint=f"use --new-tokens {context - len(prompt)} or less" if len(prompt) < context else "use a shorter --prompt",
        )
    try:
        _run_package(options, root, spec_path, cfg, report, progress)
    except RuntimeRefused as refused:
        report.agree("runtime", False, str(refused))
    return _result(root, options, report)


def _options(prompt, new_tokens, draft_tokens, atol, static_only) -> Options:
    """The arguments checked as the command's parser checks them (a usage error, exit 2)."""
    prompt = tuple(prompt)
    if not prompt or any(not isinstance(t, int) or t < 0 for t in prompt):
        raise MtpcError.single(f"prompt must be one or more token ids >= 0, not {list(prompt)}", exit_code=ExitCode.USAGE)
    if not isinstance(new_tokens, int) or new_tokens < 1:
        raise MtpcError.single(f"new_tokens must be at least 1, not {new_tokens}", exit_code=ExitCode.USAGE)
    if not isinstance(draft_tokens, int) or not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise MtpcError.single(f"draft_tokens must be 1 to {MAX_DRAFT_TOKENS}, not {draft_tokens}", exit_code=ExitCode.USAGE)
    if atol is not None and not (atol >= 0 and atol != float("inf")):
        raise MtpcError.single(f"atol must be a finite number >= 0, not {atol}", exit_code=ExitCode.USAGE)
    return Options(prompt, new_tokens, draft_tokens, atol, static_only)


def package_root(path: str | Path) -> Path:
    """The package folder verify was given, refused (usage) when it is not a package root."""
    from ..checks import GENAI_CONFIG, is_runtime_package

    path = str(path)
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


def _run_package(options: Options, root: Path, spec: Path, cfg: dict, report: Report, progress) -> None:
    """Steps 2 to 4 of the package's docstring, adding to `report`."""
    from ..tuning.run import require_runtime

    require_runtime("verify")
    from .. import sources
    from ..emit.provenance_record import package_mismatches
    from ..pipeline.driver import build_ir
    from .steps import compare_package

    ir, info = build_ir(spec)
    report.provenance = package_mismatches(root, ir, spec)
    for message in report.provenance:  # said now: a wrong spec makes everything after it fail
        progress(f"warning: {message}")
    if max(options.prompt) >= ir.architecture.vocab_size:
        raise MtpcError.single(
            f"prompt token {max(options.prompt)} is outside the vocabulary ({ir.architecture.vocab_size})",
            exit_code=ExitCode.USAGE,
        )
    progress("reading weights for the reference")
    weights = sources.open_model_weights(ir, info)
    try:
        compare_package(options, root, cfg, options.prompt, report, progress, ir, weights)
    finally:
        weights.close()


def _result(root: Path, options: Options, report: Report) -> VerifyResult:
    # Static checks alone pass a gate only when asked for: a package nothing ran is not a verified one.
    not_run = report.ok and report.static_only is not None and not options.static_only
    code = ExitCode.USAGE if not_run else ExitCode.OK if report.ok else ExitCode.FINDINGS
    tokens = lambda found: None if found is None else tuple(found)  # noqa: E731
    return VerifyResult(
        package=root, exit_code=int(code), verdict=_verdict(report, not_run), checks=tuple(report.checks),
        notes=tuple(report.notes), steps=tuple(report.steps), static_only=report.static_only,
        greedy=tokens(report.greedy), speculative=tokens(report.speculative),
        reference_greedy=tokens(report.reference_greedy), stats=report.stats, provenance=tuple(report.provenance),
    )


def _verdict(report: Report, not_run: bool) -> str:
    if not_run:
        return f"verify: NOT RUN ({report.static_only}); only the static checks passed"
    if report.ok and report.static_only:
        return f"verify: static checks only ({report.static_only})"
    if report.ok:
        return "verify: ok" + (" (but see the provenance warnings above)" if report.provenance else "")
    if any(c["check"] == "runtime" and not c["ok"] for c in report.checks):
        return "verify: FAILED (a runtime refused the package)"
    if any(c["check"] == "static" and not c["ok"] for c in report.checks):
        return "verify: FAILED (the static checks, as `mtpc check` reports them)"
    if any("different spec" in m for m in report.provenance):
        return "verify: MISMATCH: the package was compiled from another spec (see the warnings; its spec is in provenance.json)"
    if any("source differs" in m for m in report.provenance):
        return "verify: MISMATCH: the package was compiled from another source checkpoint (see the warnings)"
    return "verify: MISMATCH"
