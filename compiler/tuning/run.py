"""`tune`: measure a package on this machine and predict its decoding speed for every draft count.

What `mtpc tune` and `bench/` run: open the package (refusing what cannot run here),
encode the prompts with its tokenizer, measure (`measure`), replay the runtime's rounds
for every N and price them (`schedule`, `predict`), and gather the report (`report`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..util.decoding_defaults import MAX_DRAFT_TOKENS
from ..util.diagnostics import Diagnostic, ExitCode, MtpcError
from .package import TunablePackage, open_package
from .predict import MARGIN, Prediction, predict, recommend
from .prompts import BUILT_IN
from .schedule import acceptance_by_position

MAX_DRAFT = MAX_DRAFT_TOKENS  # onnxruntime-genai 0.18.0 accepts max_draft_tokens in 1..16
DEFAULT_MAX_DRAFT = 4
DEFAULT_NEW_TOKENS = 64
DEFAULT_SWEEPS = 24


@dataclass(frozen=True)
class TuneResult:
    package: TunablePackage
    predictions: tuple[Prediction, ...]
    recommended: int  # the draft count to use; 0: MTP off
    reason: str
    acceptance: tuple[tuple[int, int], ...]  # per draft position: (tried, accepted)
    body: dict  # the report without its envelope (see `report.payload`)


def require_runtime(verb: str = "tune") -> None:
    """onnxruntime and onnxruntime-genai are the `runtime` extra, not dependencies: say so when one is missing."""
    for module, package in (("onnxruntime", "onnxruntime"), ("onnxruntime_genai", "onnxruntime-genai")):
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise MtpcError.single(
                f"mtpc {verb} runs the package in {package}, which cannot be imported: {err}",
                exit_code=ExitCode.USAGE,
                hint="install the runtime extra: pip install 'mtpc[runtime]'",
            ) from None


def tune(
    package: str | Path,
    prompts: Sequence[str] | None = None,
    *,
    prompts_source: str | None = None,
    prompt_names: Sequence[str] | None = None,
    max_draft: int | None = None,
    new_tokens: int = DEFAULT_NEW_TOKENS,
    threads: int | None = None,
    sweeps: int = DEFAULT_SWEEPS,
    spec_position: Callable[[int], str | None] = lambda draft: None,
    progress: Callable[[str], None] = lambda message: None,
) -> TuneResult:
    """Measure `package` on `prompts` (None: the built-in ones) and predict tokens/s for N = 0..max_draft.

    `prompts_source` names them in the report (a file name); `prompt_names` in errors
    (default "prompt 1", ...). `max_draft` defaults to the larger of 4 and the package's own
    max_draft_tokens; `spec_position(draft)` says where the spec sets the recommended value.
    """
    from .measure import measure
    from .runtime import Runtime
    from .report import package_facts, payload, runtime_facts

    opened = open_package(package)
    require_runtime()
    # The runtime drafts at most W - 1 tokens on a package whose state window is W.
    held = opened.state_window - 1 if opened.state_window > 1 else MAX_DRAFT
    if max_draft is None:
        max_draft = min(max(DEFAULT_MAX_DRAFT, min(opened.max_draft_tokens or 0, MAX_DRAFT)), held)
    elif opened.state_window > 1 and max_draft > held:
        raise MtpcError.single(
            f"max_draft {max_draft} is more than this package drafts: its state window holds {opened.state_window} "
            f"tokens, so onnxruntime-genai drafts at most {held} a step; compile the spec with "
            f"targets.onnxruntime_genai.max_draft_tokens: {max_draft} to measure {max_draft} drafts",
            exit_code=ExitCode.USAGE)
    for what, value, least in (("max_draft", max_draft, 1), ("new_tokens", new_tokens, 2), ("sweeps", sweeps, 1),
                               ("threads", threads if threads is not None else 1, 1)):
        if value < least or (what == "max_draft" and value > MAX_DRAFT):
            bounds = f"from 1 to {MAX_DRAFT}" if what == "max_draft" else f"at least {least}"
            raise MtpcError.single(f"{what} must be {bounds}, not {value}", exit_code=ExitCode.USAGE)
    texts = tuple(BUILT_IN if prompts is None else prompts)
    if not texts:
        raise MtpcError.single("no prompts to decode", exit_code=ExitCode.USAGE)
    progress(f"loading {opened.root} in onnxruntime-genai")
    runtime = Runtime(opened, threads)
    encoded = [runtime.encode(text) for text in texts]
    names = list(prompt_names or [f"prompt {n}" for n in range(1, len(texts) + 1)])
    _check_lengths(encoded, names, new_tokens, max_draft, opened)
    measured = measure(runtime, encoded, new_tokens=new_tokens, max_draft=max_draft, sweeps=sweeps, progress=progress)
    predictions = predict(measured.decodings, measured.costs, max_draft, measured.cpu_costs, opened.state_window)
    recommended = recommend(predictions)
    reason = _reason(predictions, recommended)
    acceptance = acceptance_by_position(measured.decodings, max_draft)
    body = payload(
        package=package_facts(opened.root, str(package), opened.max_draft_tokens),
        runtime=runtime_facts(threads),
        prompts={
            "source": prompts_source or ("built-in" if prompts is None else "given"),
            "count": len(encoded),
            "prompt_tokens": sum(len(p) for p in encoded),
            "new_tokens": new_tokens,
            "generated_tokens": sum(len(d.generated) for d in measured.decodings),
        },
        acceptance=acceptance, costs=measured.costs, cpu_costs=measured.cpu_costs, samples=measured.samples,
        predictions=predictions, recommended=recommended, reason=reason, spec_position=spec_position(recommended),
    )
    return TuneResult(opened, predictions, recommended, reason, acceptance, body)


def _check_lengths(encoded, names, new_tokens: int, max_draft: int, package: TunablePackage) -> None:
    room = package.context_length - new_tokens - max_draft - 2
    problems = []
    for name, prompt in zip(names, encoded):
        where = f"{name}: "
        if not prompt:
            problems.append(Diagnostic(f"{where}encodes to no tokens"))
        elif package.context_length and len(prompt) > room:
            problems.append(Diagnostic(
                f"{where}{len(prompt)} tokens; with {new_tokens} new tokens and {max_draft} drafts that passes the "
                f"package's context length ({package.context_length})",
                hint=f"shorten it to {max(room, 0)} tokens or fewer, or ask for fewer --new-tokens",
            ))
    if problems:
        raise MtpcError(problems, ExitCode.USAGE)


def _reason(predictions: Sequence[Prediction], recommended: int) -> str:
    if recommended:
        chosen = predictions[recommended]
        return f"predicted {chosen.speedup:.2f}x the tokens/s of MTP off, the fastest of N = 1..{len(predictions) - 1}"
    best = max(predictions[1:], key=lambda p: p.tokens_per_second)
    if best.speedup >= 1:
        return (f"the best, N = {best.draft}, is predicted only {best.speedup:.2f}x MTP off: "
                f"under the {MARGIN:.0%} gain that pays for drafting")
    return f"every N is predicted slower than MTP off: at best {best.speedup:.2f}x, with N = {best.draft}"
