"""`mtpc.diff`: a semantic diff of two packages, or of two specs compiled in memory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..util.diagnostics import ExitCode
from .checking import PathLike, _usage, target_kind

if TYPE_CHECKING:
    from ..diffing.changes import Change
    from ..diffing.report import DiffReport


@dataclass(frozen=True)
class DiffResult:
    """The changes from `old` to `new`, sorted; exit code 1 when there is any."""

    old: Path
    new: Path
    changes: tuple["Change", ...]
    # What the diff left out and why (two specs whose own record in provenance.json differs).
    notes: tuple[str, ...] = ()

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

        return DiffReport(str(self.old), str(self.new), self.changes, self.notes)


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


def _spec_diff(a: Path, b: Path) -> tuple[list, tuple[str, ...]]:
    """Both specs compiled in memory, as `check SPEC` does (graphs left unbuilt): the IRs compared as
    `<ir>`, then the files; (changes, notes). Graphs are built only if their inputs differ: equal graph
    inputs give byte-identical graphs (`mtpc.emit.graph_files.graph_inputs`), which have nothing to show.
    A document whose text is made on demand is diffed as the document. The files made from the source on
    demand (a tokenizer: a GGUF's vocabulary converted, an HF folder's files checked) are made only if
    the two builds read different sources: one description, the same files.

    What two specs build is compared, not the specs themselves: where each file lives, its name and its
    text (comments and layout included) are left out, though provenance.json records the last two;
    when nothing else differs, a note says so. A reviewer sees the spec's own change beside the diff."""
    from dataclasses import replace

    from ..diffing.changes import diff_trees, sorted_changes
    from ..diffing.files import diff_files
    from ..diffing.report import IR_FILE
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
        changes = sorted_changes(diff_trees(ir_old, ir_new, IR_FILE)) + diff_files(files_old, files_new,
                                                                                   (documents_old, documents_new))
    kept = [c for c in changes if not _is_the_specs_own_record(c)]
    if kept or len(kept) == len(changes):
        return kept, ()
    # Said only when it is all that differs, where "no differences" would otherwise puzzle.
    which = "texts" if any(c.path[1:2] != ("file",) for c in changes) else "file names"
    return kept, (f"the specs' {which} differ: provenance.json records each spec, and a diff of two specs leaves "
                  "that record out (it compares what they build)",)


def _is_the_specs_own_record(change) -> bool:
    from ..emit.provenance_record import PROVENANCE_NAME

    return change.file == PROVENANCE_NAME and change.path[:1] == ("spec",)


def diff(old: PathLike, new: PathLike) -> DiffResult:
    """A semantic diff of two package folders or two specs (compiled in memory), as `mtpc diff` prints it.

    Each side must be what `check` takes (`checking.target_kind`): a folder that is not a package, or a
    file that is not a spec, raises `MtpcError` (usage) as `check` would, rather than diffing its files."""
    from ..diffing.files import diff_files, directory_files

    a, b = Path(old), Path(new)
    kinds = {target_kind(a), target_kind(b)}
    notes: tuple[str, ...] = ()
    if kinds == {"package"}:
        changes = diff_files(directory_files(a), directory_files(b))
    elif kinds == {"spec"}:
        changes, notes = _spec_diff(a, b)
    else:
        raise _usage("compare two package directories or two spec files",
                     hint="to compare a spec with a package, run: mtpc plan SPEC --against DIR")
    return DiffResult(a, b, tuple(changes), notes)
