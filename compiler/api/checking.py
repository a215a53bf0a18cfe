"""`mtpc.check`: spec files and package folders checked as `mtpc check` does, as a frozen result.

Re-exported by `mtpc.api.compiling` (and `mtpc`). A finding is an error (it fails the check), a
warning (a package that runs, with a gap: no tokenizer) or a note (how a target was checked:
offline, without its checkpoint). `offline=True` never opens an hf or gguf source: such a
spec is checked for all that needs no weights (schema, cross-field rules, targets) and gets a
note saying what was not; a synthetic spec is checked in full either way, and so is a hub
repo that huggingface_hub's cache holds (read with its offline mode forced: no request leaves),
while one the cache lacks gets the note, saying what it lacks.

A spec's package is checked in memory without building its ONNX graphs: the configs are
checked against the inputs and outputs the graphs are built to (the IR's contracts), and
what only a built graph holds (borrowed initializers, external data) is left to `compile`,
whose gate runs every check on the graphs it writes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..util.diagnostics import Diagnostic, ExitCode, MtpcError, workflow_command
from ..util.suggest import path_hint

PathLike = str | os.PathLike
SPEC_SUFFIXES = (".yaml", ".yml")


def _usage(message: str, hint: str | None = None) -> MtpcError:
    return MtpcError.single(message, exit_code=ExitCode.USAGE, hint=hint)


@dataclass(frozen=True)
class Reported:
    """One finding of `check`: where (file, JSON path, line) and what, and whether it fails the check."""

    file: str
    where: str  # JSON path (or artifact:JSON path for a spec's artifacts); "" for a spec diagnostic
    message: str
    line: int | None = None
    col: int | None = None
    rendered: str | None = None  # a spec diagnostic with its source line and caret
    severity: str = "error"  # "error" fails the check; "warning" and "note" do not
    hint: str | None = None

    @property
    def blocking(self) -> bool:
        return self.severity == "error"

    def text(self) -> str:
        if self.rendered is not None:
            return self.rendered
        at = f"{self.file}:{self.line}:{self.col}: " if self.line is not None else f"{self.file}:"
        where = f"{self.where}: " if self.where else ""
        label = "" if self.blocking else f"{self.severity}: "
        return f"{at}{where}{label}{self.message}" + (f"\n     = hint: {self.hint}" if self.hint else "")

    def github(self) -> str:
        """A GitHub Actions workflow command: an annotation on the file (relative to the working directory, as
        the checkout is) and line where known; warnings and notes do not fail the check, so they are not errors."""
        message = f"{self.where}: {self.message}" if self.where and self.where not in self.message else self.message
        return workflow_command(self.severity, message, title="mtpc check", hint=self.hint,
                                file=self.file, line=self.line, col=self.col)

    def to_json(self) -> dict:
        doc = {"file": self.file, "path": self.where, "message": self.message, "severity": self.severity}
        if self.hint:
            doc["hint"] = self.hint
        if self.line is not None:
            doc.update(line=self.line, column=self.col)
        return doc


@dataclass(frozen=True)
class CheckedTarget:
    path: Path
    kind: str  # "package" | "spec"
    findings: tuple[Reported, ...]


@dataclass(frozen=True)
class CheckResult:
    """Every target checked, with its findings; `unusable` says why each target that could not be checked at all
    could not (`unusable_targets[i]` is the target `unusable[i]` is about), `skipped` lists the YAML files that
    are not mtpc specs (with `skip_non_specs`)."""

    targets: tuple[CheckedTarget, ...]
    unusable: tuple[Diagnostic, ...]
    exit_code: int
    skipped: tuple[Path, ...] = ()
    unusable_targets: tuple[Path, ...] = ()

    def unusable_annotations(self) -> tuple[str, ...]:
        """`unusable` as GitHub workflow commands: at the line a diagnostic points at (a YAML error, a source
        path that does not exist), else on the target itself."""
        targets = self.unusable_targets or (None,) * len(self.unusable)
        return tuple(d.github("mtpc check", file=str(t) if t is not None else None) for d, t in zip(self.unusable, targets))

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    @property
    def findings(self) -> tuple[Reported, ...]:
        """Everything reported, warnings and notes included (`Reported.blocking` tells which fail the check)."""
        return tuple(f for t in self.targets for f in t.findings)

    @property
    def summary(self) -> str:
        total = sum(f.blocking for f in self.findings)
        warnings = sum(f.severity == "warning" for f in self.findings)
        offline = sum(f.severity == "note" for f in self.findings)
        targets = _count(len(self.targets), "target")
        extra = [_count(warnings, "warning")] if warnings else []  # reported, and not failing the check
        extra += [f"{offline} checked offline, without the checkpoint"] if offline else []
        extra += [f"{_count(len(self.skipped), 'YAML file')} not an mtpc spec, skipped"] if self.skipped else []
        extra += [f"{_count(len(self.unusable), 'target')} could not be checked"] if self.unusable else []
        if self.ok:
            return f"ok ({'; '.join([targets, *extra])})"
        return "; ".join([f"{_count(total, 'finding')} in {targets}", *extra])


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def is_spec_file(path: Path) -> bool:
    """Whether a YAML file is an mtpc spec: it has a top-level `mtpc:` key (after any comments and the
    `# yaml-language-server:` line; by convention the first key). Unreadable text counts as a spec, so
    `check` reports why it cannot be read."""
    try:
        with path.open("rb") as file:
            head = file.read(_SPEC_SNIFF_BYTES).decode("utf-8-sig", errors="replace")
    except OSError:
        return True
    return _SPEC_KEY.search(head) is not None


_SPEC_SNIFF_BYTES = 64 << 10
_SPEC_KEY = re.compile(r"""^(?:mtpc|"mtpc"|'mtpc')[ \t]*:""", re.MULTILINE)


def _from_diagnostic(spec: Path, d: Diagnostic) -> Reported:
    if d.span is not None:
        return Reported(d.span.file, d.path or "", d.message, d.span.line, d.span.col, d.render(), d.severity, d.hint)
    return Reported(str(spec), d.path or "", d.message, rendered=f"{spec}: {d.render()}", severity=d.severity, hint=d.hint)


def _from_finding(package: Path, f) -> Reported:
    return Reported(str(package / f.file), f.pointer or "/", f.message, f.line, f.col, severity=f.severity, hint=f.hint)


def target_kind(path: Path) -> str:
    """"package" or "spec": what `check` and `diff` take, by one rule. A folder is a package when a runtime
    can load it (it holds a genai_config.json or inference_metadata.yaml), a file a spec by its suffix;
    anything else is `MtpcError` (usage) saying which it is not."""
    from ..checks import is_runtime_package

    if not path.exists():
        raise _usage(f"{str(path)!r} does not exist", hint=path_hint(path))
    if path.is_dir():
        if not is_runtime_package(path):
            raise _usage(f"{str(path)!r} holds no genai_config.json or inference_metadata.yaml: not an mtpc package")
        return "package"
    if path.suffix.lower() not in SPEC_SUFFIXES:
        raise _usage(
            f"{str(path)!r} is neither a spec file ({', '.join(SPEC_SUFFIXES)}) nor a package folder",
            hint="`mtpc check` and `mtpc diff` take spec files and compiled package folders; to look at a "
            "checkpoint, run: mtpc inspect",
        )
    return "spec"


def check_target(path: Path, offline: bool = False) -> tuple[str, list[Reported]]:
    """(kind, findings) for one target; `MtpcError` (usage) when it is neither a package nor a spec."""
    from ..checks import check_files, package_directory

    if path.suffix.lower() not in SPEC_SUFFIXES:
        from ..output.write import recover

        recover(path)  # a compile into this folder that was killed: finish it first (a note says what was done)
    if target_kind(path) == "package":
        return "package", [_from_finding(path, f) for f in check_files(package_directory(path))]
    try:
        return "spec", _check_spec(path, offline)
    except MtpcError as error:
        if error.exit_code is not ExitCode.FINDINGS:
            raise _offline_hint(error) if not offline else error
        return "spec", [_from_diagnostic(path, d) for d in error.diagnostics]


def _check_spec(path: Path, offline: bool) -> list[Reported]:
    """Nothing but notes when the spec is sound; `MtpcError` with its findings (1) or why it cannot be checked (2)."""
    if offline:
        from ..spec.loader import load_spec
        from ..spec.lower import check_without_source, hub_source, source_kind

        spec = load_spec(path)
        kind, value = source_kind(spec.data["source"])
        if kind != "synthetic":
            check_without_source(spec)
            at = spec.diagnostic(("source", kind), "")

            def noted(note: str) -> list[Reported]:
                return [Reported(at.span.file, "", note, at.span.line, at.span.col, severity="note")]

            unchecked = ("the schema, the cross-field rules and the targets hold, what needs the weights (the "
                         "source's sizes, which overrides match, the package's contracts) was not checked")
            hub = hub_source(spec)
            if hub is None:
                return noted(f"checked offline: the {kind} source {value!r} was not opened; {unchecked}")
            lacks = _check_from_cache(path)  # a repo the cache holds is checked in full, from the cache
            return [] if lacks is None else noted(f"checked offline, no request made: {lacks}; {unchecked}")
    from ..pipeline.driver import build

    # build() runs the contract checks itself, in memory, as the gate compile passes before writing:
    # what it finds in a package of ours is a bug (exit 3), raised from here like any other. The graphs
    # are checked by the I/O contracts they are built to, so they are not built (nor onnx_ir imported):
    # what they hold (initializers, external data) compile checks before it writes.
    build(path, defer=True, defer_graphs=True).close()
    return []


def _check_from_cache(path: Path) -> str | None:
    """The whole check of a hub spec with huggingface_hub's offline mode forced (no request can leave), from
    what the cache holds; what it lacks, said, when that is why it could not be made (None: checked in full)."""
    from ..pipeline.driver import build
    from ..sources.hub.errors import HubFailure
    from ..sources.hub.snapshot import no_network

    with no_network():
        try:
            build(path, defer=True, defer_graphs=True).close()
        except MtpcError as error:
            failure = error if isinstance(error, HubFailure) else error.__cause__
            if isinstance(failure, HubFailure) and failure.cache_lacks:
                return failure.diagnostics[0].message
            raise
    return None


def _offline_hint(error: MtpcError) -> MtpcError:
    """An absent checkpoint: say that --offline checks the spec without it."""
    hint = "to check the spec without its checkpoint (in CI, say), run: mtpc check --offline"
    diagnostics = [
        replace(d, hint=f"{d.hint}; {hint}" if d.hint else hint) if d.path in ("source.hf", "source.gguf") else d
        for d in error.diagnostics
    ]
    return MtpcError(diagnostics, error.exit_code)


def check(*targets: PathLike, offline: bool = False, skip_non_specs: bool = False) -> CheckResult:
    """Check spec files (compiled in memory) and package folders, as `mtpc check` does.

    A target that cannot be checked (missing, neither a spec nor a package) is listed in
    `unusable` and the others are still checked; the exit code is then 2. `offline`: see the
    module's docstring; `skip_non_specs`: YAML files without a top-level `mtpc:` key are skipped."""
    if not targets:
        raise _usage("check needs at least one spec file or package folder")
    checked: list[CheckedTarget] = []
    unusable: list[Diagnostic] = []
    unusable_targets: list[Path] = []
    skipped: list[Path] = []
    for target in targets:
        path = Path(target)
        if skip_non_specs and path.suffix.lower() in SPEC_SUFFIXES and path.is_file() and not is_spec_file(path):
            skipped.append(path)
            continue
        try:
            kind, found = check_target(path, offline)
        except MtpcError as error:
            if error.exit_code is not ExitCode.USAGE:
                raise
            unusable.extend(error.diagnostics)
            unusable_targets.extend(path for _ in error.diagnostics)
            continue
        checked.append(CheckedTarget(path, kind, tuple(found)))
    total = sum(f.blocking for t in checked for f in t.findings)
    code = ExitCode.USAGE if unusable else ExitCode.FINDINGS if total else ExitCode.OK
    return CheckResult(tuple(checked), tuple(unusable), int(code), tuple(skipped), tuple(unusable_targets))
