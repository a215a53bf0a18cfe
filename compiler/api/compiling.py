"""The Python API: `mtpc.compile`, `mtpc.check` and `mtpc.diff`, each returning a frozen result object.

The `mtpc` verbs of the same names are these functions plus rendering, so a
script gets exactly what the command line would report, without parsing it:

    import mtpc

    built = mtpc.compile("specs/qwen35-tiny-mtp.yaml", "out/tiny")
    print(built.output, [f.path for f in built.files], built.notes)

    checked = mtpc.check("out/tiny", "specs/qwen35-tiny-nohead.yaml")
    assert checked.ok, [f.text() for f in checked.findings]

    mtpc.compile("specs/qwen35-tiny-nohead.yaml", "out/nohead")
    changed = mtpc.diff("out/tiny", "out/nohead")
    print(changed.summary)
    for change in changed.changes:
        print(change.render())

Findings are results, not errors: `check` and `diff` return them with the exit code
the command would give (`exit_code`, `ok`). What stops a verb before it has a result
(a spec with errors for `compile`, a path that does not exist) raises
`mtpc.diagnostics.MtpcError`, which carries the diagnostics and the exit code.
Nothing is printed unless asked: `compile(..., progress=mtpc.progress.Console())`
reports on stderr as the command does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .checking import PathLike, _usage
from ..util.diagnostics import ExitCode

if TYPE_CHECKING:
    from ..diffing.report import DiffReport
    from ..diffing.changes import Change
    from ..util.progress import Console


# ----------------------------------------------------------------------------- compile


@dataclass(frozen=True)
class PackageFile:
    path: str  # inside the package, "/"-separated
    bytes: int
    sha256: str  # of the bytes written, hashed as they streamed (what manifest.json records)


@dataclass(frozen=True)
class CompileResult:
    """A package written to `output`: its files (sorted by path; manifest.json among them, listing the others)
    and the notes compile has for the user."""

    output: Path
    files: tuple[PackageFile, ...]
    notes: tuple[str, ...]
    exit_code: int = int(ExitCode.OK)

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK


def default_output(name: str) -> Path:
    return Path("out") / name


def protected_paths(spec: PathLike, ir=None) -> list[tuple[str, PathLike]]:
    """What no package write may replace, whatever `force` says: the folder holding the spec, or (once the
    IR says where it is) the source checkpoint. `compile` and `plan --against` refuse by this one list."""
    protected: list[tuple[str, PathLike]] = [("spec", spec)]
    if ir is not None and ir.source.path is not None:
        protected.append(("source checkpoint", ir.source.path))
    return protected


def compile(  # noqa: A001 - the verb's name, as `mtpc.compile`
    spec: PathLike,
    output: PathLike | None = None,
    *,
    force: bool = False,
    progress: "Console | Callable[[str], None] | None" = None,
    jobs: int | None = None,
    tune_report: PathLike | None = None,
) -> CompileResult:
    """Compile `spec` into the package folder `output` (default `./out/<spec name>`), atomically.

    `force` replaces `output` even when it is not an mtpc package. `progress` hears the phases
    (a `mtpc.util.progress.Console` also shows bytes written with rate and ETA). Raises `MtpcError`
    when the spec is invalid (exit code 1) or a path is unusable (2); nothing is written then.
    `jobs`: threads converting weights while they are written (default: every available core);
    the package is byte-identical for any value. `tune_report`: a `mtpc tune --format json` report of a
    package of this spec; its measured table goes into the model card (`compile --tune-report`)."""
    from ..pipeline.driver import build
    from ..output.write import check_destination, write_package
    from ..weights.quant import measured_requantization_note

    if output is not None and not os.fspath(output).strip():
        # An empty DIR is a mistake (an unset variable in `-o "$DIR"`), not a request for the default.
        raise _usage(f"-o/--output is empty ({os.fspath(output)!r}): give the folder to write the package to",
                     hint="leave -o out to write to ./out/<spec name>")
    spec_path = Path(spec)
    if not spec_path.exists():
        from ..util.suggest import path_hint

        raise _usage(f"spec {os.fspath(spec)!r} does not exist", hint=path_hint(spec))
    if not spec_path.is_file():
        raise _usage(f"spec {os.fspath(spec)!r} is not a file")
    say = progress or (lambda message: None)
    if output is not None:
        # Refuse before the build, which can take minutes; the source checkpoint is known only after it.
        check_destination(output, force=force, protected=protected_paths(spec_path))
    with build(spec_path, progress=say, jobs=jobs, tune_report=tune_report) as result:
        target = Path(output) if output is not None else default_output(result.ir.name)
        protected = protected_paths(spec_path, result.ir)
        total = sum(a.nbytes or 0 for a in result.artifacts)
        say(f"writing {len(result.artifacts)} files to {target}")
        meter = progress.weights(total) if hasattr(progress, "weights") else None
        try:
            written = write_package(result.artifacts, target, force=force, protected=protected, progress=meter)
        except BaseException:
            if meter is not None:
                meter.close(finished=False)  # the error on its way says what happened, not a byte count
            raise
        if meter is not None:
            meter.close()
    measured = measured_requantization_note(result.ir.weights, result.context.requantization_error)
    notes = tuple(result.ir.notes) + ((measured,) if measured else ())
    files = tuple(PackageFile(r.name, r.bytes, r.sha256) for r in written)
    return CompileResult(target, files, notes)
