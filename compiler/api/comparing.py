"""`mtpc.diff`: a semantic diff of two packages, or of two specs compiled in memory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..util.diagnostics import ExitCode
from .checking import PathLike, _usage

if TYPE_CHECKING:
    from ..diffing.changes import Change
    from ..diffing.report import DiffReport


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
        from ..diffing.changes import summary

        return summary(list(self.changes))

    @property
    def report(self) -> "DiffReport":
        """What `mtpc diff` prints: a severity per file, grouped rows (`mtpc.diffing.render.text` / `.markdown`)."""
        from ..diffing.report import DiffReport

        return DiffReport(str(self.old), str(self.new), self.changes)


def _spec_files(result, *, with_deferred: bool) -> tuple[dict, set[str], dict[str, object]]:
    """The files of a spec's package held in memory (graphs without their weights), which of them are
    graphs left unbuilt (built when read), and the documents of those whose text is made on demand
    (compared as documents, their text unmade). Weight data is not compared; the files made from the
    source on demand (its tokenizer's) only when `with_deferred`."""
    documents = {a.relpath: a.document for a in result.artifacts if a.content is None and a.document is not None}
    files = {a.relpath: (lambda a=a: iter([a.content])) for a in result.artifacts if a.content is not None}
    unbuilt = {a.relpath for a in result.artifacts if a.content is None and a.interface is not None}
    made = {a.relpath for a in result.artifacts if a.deferred and a.interface is None and a.relpath not in documents}
    lazy = unbuilt | documents.keys() | (made if with_deferred else set())
    files.update({a.relpath: (lambda a=a: a.iter_bytes()) for a in result.artifacts if a.relpath in lazy})
    return files, unbuilt, documents


def _spec_diff(a: Path, b: Path) -> list:
    """Both specs compiled in memory, as `check SPEC` does (graphs left unbuilt): the IRs compared as
    `<ir>`, then the files. Graphs are built only if their inputs differ: equal graph inputs give
    byte-identical graphs (`mtpc.emit.graph_files.graph_inputs`), which have nothing to show. A document
    whose text is made on demand is diffed as the document. The files made from the source on demand (a
    tokenizer: a GGUF's vocabulary converted, an HF folder's files checked) are made only if the two
    builds read different sources: one description, the same files."""
    from dataclasses import replace

    from ..diffing.changes import diff_trees, sorted_changes
    from ..diffing.files import diff_files
    from ..pipeline.driver import build
    from ..emit.graph_files import same_graph_inputs

    with build(a, defer=True, defer_graphs=True) as old, build(b, defer=True, defer_graphs=True) as new:
        # Where the spec file lives is not a difference in what it means.
        ir_old, ir_new = (replace(side.ir, spec_path=None) for side in (old, new))
        one_source = old.info is new.info
        files_old, unbuilt_old, documents_old = _spec_files(old, with_deferred=not one_source)
        files_new, unbuilt_new, documents_new = _spec_files(new, with_deferred=not one_source)
        if same_graph_inputs(old.ir, new.ir):
            for rel in unbuilt_old & unbuilt_new:
                del files_old[rel], files_new[rel]
        return sorted_changes(diff_trees(ir_old, ir_new, "<ir>")) + diff_files(files_old, files_new,
                                                                                (documents_old, documents_new))


def diff(old: PathLike, new: PathLike) -> DiffResult:
    """A semantic diff of two package folders or two specs (compiled in memory), as `mtpc diff` prints it."""
    from ..diffing.files import diff_files, directory_files

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
