"""The compile pipeline end to end: spec -> IR -> passes -> artifacts -> checked output.

`build_ir` is the only way from a spec file to the final IR: `build` (behind
`compile`, `plan`, `check SPEC`, `diff SPEC SPEC`) emits artifacts from it and
`verify` runs its reference on it, so no verb can disagree about what a spec means.

`build` is also the gate: every artifact is checked against its schema, and the
package as a whole against every cross-artifact contract `mtpc check` applies,
in memory, before anything is written. A spec the runtimes could not use is
refused earlier, by lowering or a pass, at the spec field to change (exit 1);
what the gate still finds is a bug in mtpc (exit 3).
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .. import sources
from ..checks import GENAI_CONFIG, INFERENCE_METADATA, PROVENANCE_NAME, QUANTIZATION_REPORT, artifact_files, check_files
from ..util.diagnostics import Diagnostic, ExitCode, MtpcError
from ..emit import EMITTERS
from ..emit.artifact import Artifact, EmitContext, Progress
from ..ir import ModelIR
from ..passes import default_pipeline
from ..passes.pipeline import PassResult, Pipeline
from ..schema.validation import errors as schema_errors, json_path, load_schema, read_yaml
from ..sources.info import SourceInfo

if TYPE_CHECKING:
    from ..spec.loaded import LoadedSpec


@dataclass
class Build:
    """A compiled spec in memory. `.onnx.data` artifacts read the open weight store when streamed;
    use the build as a context manager (or call `close`) to close the store once they are written."""

    ir: ModelIR
    info: SourceInfo
    artifacts: list[Artifact]
    pass_results: list[tuple[str, PassResult]]
    context: EmitContext

    def close(self) -> None:
        self.context.close()

    def __enter__(self) -> "Build":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


def build_ir(spec_path: str | Path, pipeline: Pipeline | None = None, *, source_files: bool = False,
             progress: Progress = lambda message: None) -> tuple[ModelIR, SourceInfo]:
    """Load and lower a spec and run the passes (`pipeline`, the default one if None) over it.

    A pass's refusal is pointed at the spec field it names. `source_files`: download a hub source's files
    (with `progress`) and make the source's on-demand files (its tokenizer's) while lowering, a refusal
    pointed at the spec's `source` (see `lower`).
    """
    from ..spec.loader import load_spec
    from ..spec.lower import lower

    spec = load_spec(spec_path)
    ir, info = lower(spec, source_files=source_files, progress=progress)
    try:
        ir = (pipeline or default_pipeline()).run(ir)
    except MtpcError as err:
        raise _positioned(err, spec) from err
    return ir, info


def build(
    spec_path: str | Path,
    *,
    progress: Progress = lambda message: None,
    observer: Callable[[str, PassResult], None] | None = None,
    defer: bool = False,
    defer_graphs: bool = False,
    jobs: int | None = None,
    tune_report: str | Path | None = None,
) -> Build:
    """Compile a spec in memory. Weight data stays lazy: `.onnx.data` artifacts stream when read.

    `defer`: leave `deferred` artifacts (a tokenizer.json converted from a GGUF vocabulary) unmade
    until read, and their own checks undone, for a verb that writes nothing (`check SPEC`, `plan`,
    `diff`); by default they are made here and checked with the rest, as `compile` needs.
    `defer_graphs` (with `defer`): the ONNX graphs too, built on first read (emit/graph_files.py); the
    contract checks read their I/O from the IR's contracts, and the checks of what the graphs hold
    (initializers, external data) are left to `compile`. `jobs`:
    threads producing weights while a data file streams (default: every available core); the bytes
    are the same for any value. `tune_report`: a `mtpc tune` JSON report whose measured table goes into
    the model card; it must be of this spec's checkpoint and stored weights (exit 2 otherwise).
    """
    table = None
    if tune_report is not None:
        from ..tuning.report import load_report

        table = load_report(tune_report)  # an unreadable report is refused before the build, which can take minutes
    pipeline = default_pipeline(observer)
    # compile makes the source's tokenizer files first: a checkpoint's broken tokenizer.json is refused at
    # the spec's `source` before any graph is built, as a broken header is.
    ir, info = build_ir(spec_path, pipeline, source_files=not defer, progress=progress)
    from ..emit.provenance_record import record

    ctx = EmitContext(info, lambda: sources.open_model_weights(ir, info), progress, provenance=record(ir, spec_path))
    if jobs is not None:
        ctx.jobs = jobs
    if defer_graphs and not defer:
        raise ValueError("defer_graphs needs defer: compile builds the graphs it checks and writes")
    ctx.defer_graphs = defer_graphs
    ctx.speed_table = table
    artifacts: list[Artifact] = []
    try:
        for name, emitter in EMITTERS:
            progress(f"emitting {name}")
            artifacts.extend(emitter(ir, ctx))
        if not defer:
            artifacts = [a.made() if a.deferred else a for a in artifacts]
        if table is not None:
            from ..tuning.report import check_report_fits

            # The package's small files, a document's text made if need be (`plan` leaves them unmade).
            small = {a.relpath: a for a in artifacts if a.content is not None or a.document is not None}
            check_report_fits(table, lambda name: small[name].read() if name in small else None, tune_report)
        seen: set[str] = set()
        for i, art in enumerate(artifacts):
            if art.relpath in seen:
                raise AssertionError(f"two emitters wrote {art.relpath}")
            seen.add(art.relpath)
            if posixpath.basename(art.relpath) not in _VALIDATED_BY_CHECKS and art.schema is not None:
                artifacts[i] = art = art.with_document(parse_artifact(art))  # the checks read this parse
                validate_artifact(art)
        progress("checking the package's contracts")
        check_contracts(artifacts)
    except BaseException:
        ctx.close()
        raise
    return Build(ir, info, sorted(artifacts, key=lambda a: a.relpath), pipeline.results, ctx)


# Files `check_files` always validates against their schemas (the same ones their emitters declare,
# tests/checks/test_checks.py holds the two together): validating them here as well would do it twice, and
# a 64-layer package's quantization.json takes jsonschema a second.
_VALIDATED_BY_CHECKS = (GENAI_CONFIG, INFERENCE_METADATA, QUANTIZATION_REPORT, PROVENANCE_NAME)


def parse_artifact(art: Artifact):
    if art.document is not None:
        return art.document
    if art.relpath.endswith(".json"):
        return json.loads(art.read().decode("utf-8"))
    if art.relpath.endswith((".yaml", ".yml")):
        return read_yaml(art.read().decode("utf-8"))
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


def check_contracts(artifacts: list[Artifact]) -> None:
    """The contract checks of `mtpc check`, over a package still in memory; a finding is a bug in mtpc.

    Reads the configs and the graph protos (or, for graphs not built yet, their I/O contracts),
    never the weights: a streamed data file is measured by the size its layout declares.
    """
    # Warnings (a package with no tokenizer, from a source that ships none) are the compile notes' to say.
    findings = [f for f in check_files(artifact_files(artifacts)) if f.blocking]
    if findings:
        raise MtpcError(
            [Diagnostic(f"the package would fail `mtpc check`: {f.message}", path=f"{f.file}:{f.pointer or '/'}") for f in findings],
            ExitCode.INTERNAL,
        )
