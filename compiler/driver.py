"""The compile pipeline end to end: spec -> IR -> passes -> artifacts -> checked output.

Every verb that compiles (`compile`, `plan`, `check SPEC`, `diff SPEC SPEC`,
`verify`) goes through `build`, so they cannot disagree about what a spec means.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import yaml

from . import sources
from .diagnostics import Diagnostic, ExitCode, MtpcError
from .emit import EMITTERS, Artifact
from .ir import ModelIR
from .passes import PassResult, default_pipeline
from .validation import errors as schema_errors, json_path, load_schema
from .sources import SourceInfo
from .weights import WeightStore

if TYPE_CHECKING:
    from .spec.loader import LoadedSpec

Progress = Callable[[str], None]


@dataclass
class EmitContext:
    """What emitters may use besides the IR."""

    info: SourceInfo
    weights_factory: Callable[[], WeightStore]
    progress: Progress = lambda message: None
    # Facts one emitter publishes for a later one (e.g. the data-file layout for shared initializers).
    facts: dict = field(default_factory=dict)
    _weights: WeightStore | None = None

    @property
    def weights(self) -> WeightStore:
        if self._weights is None:
            self._weights = self.weights_factory()
        return self._weights


@dataclass
class Build:
    ir: ModelIR
    info: SourceInfo
    artifacts: list[Artifact]
    pass_results: list[tuple[str, PassResult]]


def _load_emitters() -> None:
    # Importing registers them; the import order is the artifact order.
    from .emit import onnx_graphs, genai_config, inference_metadata, tokenizer, model_card  # noqa: F401


def lower_spec(spec_path: str | Path) -> tuple[ModelIR, SourceInfo]:
    from .spec.loader import load_spec
    from .spec.lower import lower

    spec = load_spec(spec_path)
    return lower(spec)


def _positioned(err: MtpcError, spec: "LoadedSpec") -> MtpcError:
    """`err` with each unplaced diagnostic about a spec field (`path` like "mtp.head") pointed at that field.

    Passes see only the IR, so they name the spec field they refuse; the spec knows where it is written.
    """
    fields = load_schema("spec")["properties"]

    def placed(diag: Diagnostic) -> Diagnostic:
        if diag.span is not None or not diag.path or not _SPEC_FIELD.fullmatch(diag.path):
            return diag
        path = tuple(diag.path.split("."))
        if path[0] not in fields:
            return diag
        anchor = spec.diagnostic(path, diag.message)
        return replace(diag, span=anchor.span, source_line=anchor.source_line)

    return MtpcError([placed(d) for d in err.diagnostics], err.exit_code)


_SPEC_FIELD = re.compile(r"[a-z_]+(\.[a-z_]+)*")  # "mtp.head"; an artifact path matches no spec section


def build(
    spec_path: str | Path,
    *,
    progress: Progress = lambda message: None,
    observer: Callable[[str, PassResult], None] | None = None,
) -> Build:
    """Compile a spec in memory. Weight data stays lazy: `.onnx.data` artifacts stream when read."""
    from .spec.loader import load_spec
    from .spec.lower import lower

    spec = load_spec(spec_path)
    ir, info = lower(spec)
    pipeline = default_pipeline(observer)
    try:
        ir = pipeline.run(ir)
    except MtpcError as err:
        raise _positioned(err, spec) from err
    _load_emitters()
    ctx = EmitContext(info, lambda: sources.open_weights(ir.source, info), progress)
    artifacts: list[Artifact] = []
    for name, emitter in EMITTERS.items():
        progress(f"emitting {name}")
        artifacts.extend(emitter(ir, ctx))
    seen: set[str] = set()
    for art in artifacts:
        if art.relpath in seen:
            raise AssertionError(f"two emitters wrote {art.relpath}")
        seen.add(art.relpath)
        validate_artifact(art)
    return Build(ir, info, sorted(artifacts, key=lambda a: a.relpath), pipeline.results)


def parse_artifact(art: Artifact):
    if art.relpath.endswith(".json"):
        return json.loads(art.read().decode("utf-8"))
    if art.relpath.endswith((".yaml", ".yml")):
        return yaml.safe_load(art.read().decode("utf-8"))
    return None


def validate_artifact(art: Artifact) -> None:
    """Our own output failing its schema is a bug in mtpc, not a user error."""
    if art.schema is None:
        return
    instance = parse_artifact(art)
    problems = schema_errors(art.schema, instance)
    if problems:
        raise MtpcError(
            [
                Diagnostic(f"emitted artifact violates {art.schema}: {e.message}", path=f"{art.relpath}:{json_path(e)}")
                for e in problems
            ],
            ExitCode.INTERNAL,
        )
