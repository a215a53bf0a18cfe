"""The Python API: `mtpc.compile`, `mtpc.check` and `mtpc.diff`, each returning a frozen result object.

The `mtpc` verbs of the same names are these functions plus rendering, so a
script gets exactly what the command line would report, without parsing it:

    import mtpc

    built = mtpc.compile("specs/qwen35-tiny-mtp.yaml", "out/tiny")
    print(built.output, [f.path for f in built.files], built.notes)

    checked = mtpc.check("out/tiny", "specs/qwen35-tiny-nohead.yaml")
    assert checked.ok, [f.text() for f in checked.findings]

    changed = mtpc.diff("out/tiny", "out/other")
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

from .api_check import PathLike, _usage
from .diagnostics import ExitCode

if TYPE_CHECKING:
    from .diff_report import DiffReport
    from .diffing import Change
    from .progress import Console


# ----------------------------------------------------------------------------- compile


@dataclass(frozen=True)
class PackageFile:
    path: str  # inside the package, "/"-separated
    bytes: int


@dataclass(frozen=True)
class CompileResult:
    """A package written to `output`: its files (sorted by path) and the notes compile has for the user."""

    output: Path
    files: tuple[PackageFile, ...]
    notes: tuple[str, ...]
    exit_code: int = int(ExitCode.OK)

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK


def default_output(name: str) -> Path:
    return Path("out") / name


def compile(  # noqa: A001 - the verb's name, as `mtpc.compile`
    spec: PathLike,
    output: PathLike | None = None,
    *,
    force: bool = False,
    progress: "Console | Callable[[str], None] | None" = None,
    jobs: int | None = None,
) -> CompileResult:
    """Compile `spec` into the package folder `output` (default `./out/<spec name>`), atomically.

    `force` replaces `output` even when it is not an mtpc package. `progress` hears the phases
    (a `mtpc.progress.Console` also shows bytes written with rate and ETA). Raises `MtpcError`
    when the spec is invalid (exit code 1) or a path is unusable (2); nothing is written then.
    `jobs`: threads converting weights while they are written (default: every available core);
    the package is byte-identical for any value."""
    from .driver import build
    from .output import check_destination, write_package
    from .quant import measured_requantization_note

    if output is not None and not os.fspath(output).strip():
        # An empty DIR is a mistake (an unset variable in `-o "$DIR"`), not a request for the default.
        raise _usage(f"-o/--output is empty ({os.fspath(output)!r}): give the folder to write the package to",
                     hint="leave -o out to write to ./out/<spec name>")
    spec_path = Path(spec)
    if not spec_path.exists():
        raise _usage(f"spec {os.fspath(spec)!r} does not exist")
    if not spec_path.is_file():
        raise _usage(f"spec {os.fspath(spec)!r} is not a file")
    say = progress or (lambda message: None)
    protected = [("spec", spec_path)]
    if output is not None:
        # Refuse before the build, which can take minutes; the source checkpoint is known only after it.
        check_destination(output, force=force, protected=protected)
    with build(spec_path, progress=say, jobs=jobs) as result:
        target = Path(output) if output is not None else default_output(result.ir.name)
        if result.ir.source.path is not None:
            protected.append(("source checkpoint", result.ir.source.path))
        total = sum(a.nbytes or 0 for a in result.artifacts)
        say(f"writing {len(result.artifacts)} files to {target}")
        meter = progress.weights(total) if hasattr(progress, "weights") else None
        try:
            write_package(result.artifacts, target, force=force, protected=protected, progress=meter)
        except BaseException:
            if meter is not None:
                meter.close(finished=False)  # the error on its way says what happened, not a byte count
            raise
        if meter is not None:
            meter.close()
    measured = measured_requantization_note(result.ir.weights, result.context.requantization_error)
    notes = tuple(result.ir.notes) + ((measured,) if measured else ())
    files = tuple(PackageFile(a.relpath, (target / a.relpath).stat().st_size) for a in result.artifacts)
    return CompileResult(target, files, notes)


# ----------------------------------------------------------------------------- check
# In its own module (it is most of the API's rules); `mtpc.api.check` and `mtpc.check` are these.

from .api_check import CheckedTarget, CheckResult, Reported, check, check_target  # noqa: E402, F401


# ----------------------------------------------------------------------------- diff


@dataclass(frozen=True)
class DiffResult:
    """The changes from `old` to `new`, sorted; exit code 1 when there is any."""

    old: Path
    new: Path
    changes: tuple["Change", ...]

    @property
    def exit_code(self) -> int:
        return int(ExitCode.FINDINGS if self.changes else ExitCode.OK)

    @property
    def ok(self) -> bool:
        return not self.changes

    @property
    def summary(self) -> str:
        from .diffing import summary

        return summary(list(self.changes))

    @property
    def report(self) -> "DiffReport":
        """What `mtpc diff` prints: a severity per file, grouped rows (`mtpc.diff_render.text` / `.markdown`)."""
        from .diff_report import DiffReport

        return DiffReport(str(self.old), str(self.new), self.changes)


def _spec_files(result) -> tuple[dict, set[str]]:
    """The files of a spec's package held in memory (graphs without their weights), and which of them are
    graphs left unbuilt (built when read). Weight data and the deferred tokenizer are not compared."""
    files = {a.relpath: (lambda a=a: iter([a.content])) for a in result.artifacts if a.content is not None}
    unbuilt = {a.relpath for a in result.artifacts if a.content is None and a.interface is not None}
    files.update({a.relpath: (lambda a=a: a.iter_bytes()) for a in result.artifacts if a.relpath in unbuilt})
    return files, unbuilt


def _spec_diff(a: Path, b: Path) -> list:
    """Both specs compiled in memory, as `check SPEC` does (graphs left unbuilt): the IRs compared as
    `<ir>`, then the files. Graphs are built only if their inputs differ: equal graph inputs give
    byte-identical graphs (`mtpc.emit.graph_files.graph_inputs`), which have nothing to show."""
    from .diffing import diff_files, diff_values, sorted_changes, to_plain
    from .driver import build
    from .emit.graph_files import same_graph_inputs

    with build(a, defer=True, defer_graphs=True) as old, build(b, defer=True, defer_graphs=True) as new:
        # Where the spec file lives is not a difference in what it means.
        ir_old, ir_new = (to_plain(side.ir) for side in (old, new))
        ir_old.pop("spec_path", None)
        ir_new.pop("spec_path", None)
        (files_old, unbuilt_old), (files_new, unbuilt_new) = _spec_files(old), _spec_files(new)
        if same_graph_inputs(old.ir, new.ir):
            for rel in unbuilt_old & unbuilt_new:
                del files_old[rel], files_new[rel]
        return sorted_changes(diff_values(ir_old, ir_new, "<ir>")) + diff_files(files_old, files_new)


def diff(old: PathLike, new: PathLike) -> DiffResult:
    """A semantic diff of two package folders or two specs (compiled in memory), as `mtpc diff` prints it."""
    from .diffing import diff_files, directory_files

    a, b = Path(old), Path(new)
    for p in (a, b):
        if not p.exists():
            raise _usage(f"{str(p)!r} does not exist")
    if a.is_dir() and b.is_dir():
        changes = diff_files(directory_files(a), directory_files(b))
    elif a.is_file() and b.is_file():
        changes = _spec_diff(a, b)
    else:
        raise _usage("compare two package directories or two spec files",
                     hint="to compare a spec with a package, run: mtpc plan SPEC --against DIR")
    return DiffResult(a, b, tuple(changes))
