"""A diff as a reviewer reads it: severity per file first, then grouped changes, then notes.

Severity follows the classes mobius's architecture-diff bot labels pull requests with
(there per sub-model: interface change, nodes added / removed or rewired, attributes
or initializers changed, nothing), applied here per file of the package:

- major: a graph's interface changed (an input or output added, removed, retyped or
  reshaped), or a graph was added or removed: whatever runs the package must change too;
- moderate: nodes added, removed, retyped or rewired; a file other than a graph added or removed;
- minor: node attributes, initializers, opsets or metadata of a graph; any other file's content;
- none: nothing.

The whole diff's severity is its worst file's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from .groups import Group, group_changes
from .changes import ADDED, CHANGED, Change, REMOVED, summary
from .files import TEXT_SUFFIXES
from ..emit.manifest import MANIFEST_NAME
from ..emit.provenance_record import PROVENANCE_NAME
from .onnx_summary import INTERFACE, data_file_note

NONE, MINOR, MODERATE, MAJOR = "none", "minor", "moderate", "major"
SEVERITIES = (NONE, MINOR, MODERATE, MAJOR)
# Status marks as the mobius bot shows them.
MARKS = {NONE: "⚪", MINOR: "🔵", MODERATE: "🟡", MAJOR: "🔴"}


_GRAPH_ORDER = {"inputs": 1, "outputs": 2, "ops": 3, "nodes": 4, "initializers": 5, "opsets": 6, "metadata": 7}

# Two specs' IRs compared (`api/comparing.py`), as one more file of the diff.
IR_FILE = "<ir>"
# The IR's fields a spec writes; the others (the decoders' contracts, every weight's stored form, the notes) the
# passes derive from these. A change to one of these is the cause of everything else a diff of two specs shows.
SPEC_FIELDS = ("name", "source", "architecture", "mtp", "precision", "quantization", "targets")


def is_cause(group: Group) -> bool:
    """A row of what the spec itself changed: a setting of the compiled spec (`<ir>`, two specs), or the spec's
    text as a package records it (`provenance.json`'s `/spec`, two packages or a plan against one)."""
    path = group.changes[0].path
    if group.file == IR_FILE:
        return path[:1] != () and path[0] in SPEC_FIELDS
    return group.file == PROVENANCE_NAME and path[:1] == ("spec",)


@dataclass(frozen=True)
class FileVerdict:
    file: str
    severity: str
    reason: str
    changes: int

    def to_json(self) -> dict:
        return {"file": self.file, "severity": self.severity, "reason": self.reason, "changes": self.changes}


def _items(changes: list[Change], what: str) -> str:
    """`inputs +1 -2 ~64`: items (ports, nodes) added, removed and changed inside, each counted once."""
    added = {c.path[1] for c in changes if len(c.path) == 2 and c.kind == ADDED}
    removed = {c.path[1] for c in changes if len(c.path) == 2 and c.kind == REMOVED}
    changed = {c.path[1] for c in changes if len(c.path) > 2}
    counts = [f"{sign}{len(s)}" for sign, s in (("+", added), ("-", removed), ("~", changed)) if s]
    return f"{what} {' '.join(counts)}"


def _graph_verdict(changes: list[Change]) -> tuple[str, str]:
    interface = [c for c in changes if c.path[0] in INTERFACE]
    if interface:
        sides = [_items([c for c in interface if c.path[0] == side], side) for side in INTERFACE]
        return MAJOR, "interface changed: " + ", ".join(s for s in sides if s.split(" ", 1)[1])
    nodes = [c for c in changes if c.path[0] == "nodes"]
    added_removed = [c for c in nodes if len(c.path) == 2]
    rewired = [c for c in nodes if len(c.path) > 2 and c.path[2] in ("op", "inputs", "outputs")]
    if added_removed or rewired or any(c.path[0] == "ops" for c in changes):
        parts = [_items(added_removed, "nodes")] if added_removed else []
        if rewired:
            parts.append(f"{len({c.path[1] for c in rewired})} nodes retyped or rewired")
        return MODERATE, "; ".join(parts) or "operator counts changed"
    touched = sorted({"attributes" if c.path[0] == "nodes" else str(c.path[0]) for c in changes})
    return MINOR, " and ".join(touched) + " changed"


def file_verdict(file: str, changes: list[Change]) -> FileVerdict:
    """How much one file's changes matter, and why, in a few words."""
    if not changes:
        return FileVerdict(file, NONE, "no change", 0)
    whole = [c for c in changes if not c.path]
    graph = file.endswith(".onnx")
    if whole and whole[0].kind in (ADDED, REMOVED):
        what = "graph" if graph else "file"
        return FileVerdict(file, MAJOR if graph else MODERATE, f"{what} {whole[0].kind}", len(changes))
    if graph and not whole:
        severity, reason = _graph_verdict(changes)
        return FileVerdict(file, severity, reason, len(changes))
    if whole:  # compared by hash: nothing finer is known
        return FileVerdict(file, MINOR, "bytes differ", len(changes))
    reason = "the compiled spec changed" if file == IR_FILE else "text changed" if file.endswith(TEXT_SUFFIXES) else "settings changed"
    return FileVerdict(file, MINOR, reason, len(changes))


def worst(severities) -> str:
    return max(severities, key=SEVERITIES.index, default=NONE)


@dataclass(frozen=True)
class DiffReport:
    """Everything every output format of `diff` shows, computed once so that they agree."""

    old: str
    new: str
    changes: tuple[Change, ...]
    extra_notes: tuple[str, ...] = field(default=())

    @cached_property
    def by_file(self) -> dict[str, list[Change]]:
        out: dict[str, list[Change]] = {}
        for c in self.changes:
            out.setdefault(c.file, []).append(c)
        return out

    @cached_property
    def verdicts(self) -> list[FileVerdict]:
        """Worst first, then by path."""
        verdicts = [file_verdict(f, cs) for f, cs in self.by_file.items()]
        return sorted(verdicts, key=lambda v: (-SEVERITIES.index(v.severity), v.file))

    @property
    def severity(self) -> str:
        return worst(v.severity for v in self.verdicts)

    @cached_property
    def groups(self) -> dict[str, list[Group]]:
        """Rows per file; a graph's in reading order: interface, operators, nodes, initializers, the rest; the
        compiled spec's settings before what the passes derived from them."""
        out = {}
        for f, cs in self.by_file.items():
            groups = group_changes(cs)
            if f.endswith(".onnx"):
                groups.sort(key=lambda g: _GRAPH_ORDER.get(g.changes[0].path[0] if g.changes[0].path else "", 0))
            elif f == IR_FILE:
                groups.sort(key=lambda g: not is_cause(g))
            out[f] = groups
        return out

    @cached_property
    def cause(self) -> list[Group]:
        """The rows of what the spec itself changed (`is_cause`): the one place a reviewer reads why."""
        return [g for f in sorted(self.groups) for g in self.groups[f] if is_cause(g)]

    @cached_property
    def file_notes(self) -> dict[str, str]:
        """Per changed weight file, where the meaning of its change is; for the manifest, that it follows the files."""
        changed = set(self.by_file)
        notes = {
            f: data_file_note(f, changed)
            for f, cs in self.by_file.items()
            if f.endswith(".onnx.data") and any(not c.path and c.kind == CHANGED for c in cs)
        }
        if any(not c.path and c.kind == CHANGED for c in self.by_file.get(MANIFEST_NAME, ())):
            # Each of its rows would repeat a change the file it is about shows: compared by hash, it says only that.
            notes[MANIFEST_NAME] = "it lists every file's size and sha256, so it changes with them: their rows say how"
        return notes

    @property
    def summary(self) -> str:
        return summary(list(self.changes))

    def to_json(self) -> dict:
        return {
            "old": self.old,
            "new": self.new,
            "summary": self.summary,
            "severity": self.severity,
            "files": [
                {**v.to_json(), "rows": [g.to_json() for g in self.groups[v.file]], **_note(self.file_notes, v.file)}
                for v in self.verdicts
            ],
            "notes": list(self.extra_notes),
            "changes": [c.to_json() for c in self.changes],
        }


def _note(notes: dict[str, str], file: str) -> dict:
    return {"note": notes[file]} if file in notes else {}

