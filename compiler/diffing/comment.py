"""A `DiffReport` as a pull-request comment (Markdown, templates/diff.md.j2), cause first, within GitHub's limit.

A reviewer's first question is why the package changed, and one setting usually says it: `precision.io_dtype:
float32 -> float16` explains thousands of graph rows on a 64-layer model. So the comment opens with what the spec
itself changed (`DiffReport.cause`: the compiled spec's settings, or a package's recorded spec text), which is
never cut, then the severity table, then every file's other rows folded in `<details>`, the rest of the compiled
spec (what the passes derived: contracts, weights) first. Rows two graphs share (`model.onnx` and onnx-genai's `decoder.onnx` are one model for two runtimes) are
shown once under both. The comment stays within GitHub's 65,536 characters: the compiled spec's rows are kept
whole, the other folded rows share the room left, a row at a time for each section in turn (so that every file
shows its first rows), and a note says how many were left out and which output shows them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .changes import ADDED, REMOVED, short_pair, short_value
from .groups import Group
from .report import IR_FILE, MARKS, DiffReport, FileVerdict

if TYPE_CHECKING:  # imported by `_environment`: only the Markdown output is a template
    import jinja2

# GitHub refuses a comment body longer than this many characters.
GITHUB_COMMENT_LIMIT = 65_536
_KIND_MARK = {ADDED: "➕", REMOVED: "➖"}
_CHANGED_MARK = "✏️"


def comment_length(text_: str) -> int:
    """Characters as the strictest counter counts them (UTF-16 units: an emoji is two), never fewer than
    Python's `len`, so a comment cut to the limit here fits whichever way the limit is counted."""
    return len(text_.encode("utf-16-le")) // 2


def cell(value: object) -> str:
    """A value in a Markdown table cell: inline code, hashes shortened, pipes escaped, long values cut."""
    return _code(short_value(value, limit=120))


def _code(text_: str) -> str:
    return "`" + text_.replace("|", "\\|").replace("`", "'") + "`"


def markdown_row(g: Group) -> str:
    mark = _KIND_MARK.get(g.kind, _CHANGED_MARK)
    if g.whole_file:
        label = {ADDED: "file added", REMOVED: "file removed"}.get(g.kind, "bytes differ")
    else:
        label = _code(g.pattern) + (f" ×{g.count}" if g.count > 1 else "")
    if g.kind not in (ADDED, REMOVED):  # a whole file's hashes, or the values changed
        old, new = (_code(t) for t in short_pair(g.old, g.new, limit=120))
    else:  # what was added or removed: a single item's value, a group's shared kind, nothing for a file
        old = cell(g.old) if g.kind == REMOVED and g.old is not None else ""
        new = cell(g.new) if g.kind == ADDED and g.new is not None else ""
    return f"| {mark} | {label} | {old} | {new} |"


@dataclass(frozen=True)
class _Section:
    """One folded `<details>`: a file's rows, or the rows several graphs share (shown once for all)."""

    summary: str
    rows: list[str]
    note: str | None = None
    ir: bool = False  # the compiled spec's rows: never cut while they can fit


def _html(file: str) -> str:
    return f"<code>{file.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')}</code>"


def _rows_phrase(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''}"


def _sections(report: DiffReport) -> list[_Section]:
    """Every file's rows but the cause's, worst file first; the rows two twin graphs (`_twins`) hold alike, once
    for both, before either's own."""
    cause = {id(g) for g in report.cause}
    own = {v.file: [g for g in report.groups[v.file] if id(g) not in cause] for v in report.verdicts}
    rows = {f: [markdown_row(g) for g in groups] for f, groups in own.items()}
    # Whole-file rows are never shared: "graph removed" in two files is two changes.
    shareable = {f: {r for r, g in zip(rows[f], own[f]) if not g.whole_file} for f in own}
    twin = _twins([v.file for v in report.verdicts], shareable)
    order = [v.file for v in report.verdicts]
    sections: list[_Section] = []
    for v in sorted(report.verdicts, key=lambda v: v.file != IR_FILE):  # the compiled spec's first
        other = twin.get(v.file)
        shared = shareable[v.file] & shareable[other] if other else set()
        if other and order.index(v.file) < order.index(other):
            together = [r for r in rows[v.file] if r in shared]
            sections.append(_Section(f"{_html(v.file)} and {_html(other)} · {MARKS[v.severity]} {v.severity} · the same "
                                     f"{_rows_phrase(len(together))} in both (one model for two runtimes)", together))
        alone = [r for r in rows[v.file] if r not in shared]
        summary = _summary(v, len(rows[v.file]), len(shared), len(report.groups[v.file]) - len(rows[v.file]),
                           len(alone), other)
        sections.append(_Section(summary, alone, report.file_notes.get(v.file), ir=v.file == IR_FILE))
    return [s for s in sections if s.rows or s.note]


def _twins(files: list[str], shareable: dict[str, set[str]]) -> dict[str, str]:
    """Graphs whose rows are mostly the same, paired, the closest first: onnx-genai's `decoder.onnx` beside
    `model.onnx`, its sidecar head beside onnxruntime-genai's `mtp/mtp.onnx`."""
    graphs = [f for f in files if f.endswith(".onnx") and shareable[f]]
    pairs = sorted(((len(shareable[a] & shareable[b]), a, b) for i, a in enumerate(graphs) for b in graphs[i + 1:]),
                   reverse=True)
    twin: dict[str, str] = {}
    for common, a, b in pairs:
        if a not in twin and b not in twin and 2 * common >= max(len(shareable[a]), len(shareable[b])):
            twin[a], twin[b] = b, a
    return twin


def _summary(v: FileVerdict, rows: int, shared: int, cause: int, alone: int, twin: str | None) -> str:
    head = f"{_html(v.file)} · {MARKS[v.severity]} {v.severity} · {v.changes} change{'s' if v.changes != 1 else ''}"
    if cause:
        return f"{head}: {_rows_phrase(cause)} above, as the spec's change, and {_rows_phrase(rows)} more"
    if shared:
        return f"{head}: {_rows_phrase(shared)} above, with {_html(twin or '')}, and {_rows_phrase(alone)} of its own"
    return head + (f" in {_rows_phrase(rows)}" if rows != v.changes else "")


def _environment() -> jinja2.Environment:
    from importlib import resources

    import jinja2

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: resources.files("mtpc.templates").joinpath(name).read_text("utf-8")),
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def markdown(report: DiffReport, limit: int = GITHUB_COMMENT_LIMIT, title: str = "mtpc diff") -> str:
    """The Markdown comment, at most `limit` characters; `title` names the verb (`mtpc plan` uses it too)."""
    template = _environment().get_template("diff.md.j2")
    cause = [markdown_row(g) for g in report.cause]
    sections = _sections(report)
    total = len(cause) + sum(len(s.rows) for s in sections)

    def render(shown: list[int], cause_shown: int) -> str:
        folded = [{"summary": s.summary, "rows": s.rows[:n], "cut": len(s.rows) - n, "note": s.note}
                  for s, n in zip(sections, shown)]
        cut = sum(f["cut"] for f in folded) + len(cause) - cause_shown
        return template.render(
            report=report, title=title, mark=MARKS[report.severity], marks=MARKS,
            cause=cause[:cause_shown], cause_cut=len(cause) - cause_shown, cause_where=_cause_where(report),
            sections=folded, cut=cut, total_rows=total, limit=limit,
            cut_where=", ".join((["the spec's change"] if cause_shown < len(cause) else [])
                                + [f["summary"].split(" · ")[0] for f in folded if f["cut"]]),
        ).rstrip("\n")

    everything = [len(s.rows) for s in sections]
    full = render(everything, len(cause))
    if comment_length(full) <= limit:
        return full
    # The spec's change and the rest of the compiled spec's are kept whole; they are cut (the derived rows
    # first) only when they alone cannot fit, which no spec of a real model comes near.
    kept = [len(s.rows) if s.ir else 0 for s in sections]
    cause_shown = len(cause)
    while comment_length(render(kept, cause_shown)) > limit and (any(kept) or cause_shown):
        if any(kept):
            kept[max(i for i, n in enumerate(kept) if n)] -= 1
        else:
            cause_shown -= 1
    shown = _share(sections, kept, limit - comment_length(render(kept, cause_shown)) - 200)
    out = render(shown, cause_shown)
    while comment_length(out) > limit and shown != kept:  # the estimate was short: give back the last row taken
        most = max((i for i in range(len(shown)) if shown[i] > kept[i]), key=lambda i: (shown[i], i))
        shown[most] -= 1
        out = render(shown, cause_shown)
    return out


def _share(sections: list[_Section], kept: list[int], budget: int) -> list[int]:
    """How many rows of each section fit in `budget` characters beside the `kept` ones, taken a row at a time from
    each section in turn."""
    shown = list(kept)
    taking = True
    while taking:
        taking = False
        for i, s in enumerate(sections):
            if shown[i] < len(s.rows) and comment_length(s.rows[shown[i]]) + 1 <= budget:
                budget -= comment_length(s.rows[shown[i]]) + 1
                shown[i] += 1
                taking = True
    return shown


def _cause_where(report: DiffReport) -> str:
    files = sorted({g.file for g in report.cause})
    return " and ".join("`<ir>`, the compiled spec's settings" if f == IR_FILE else f"`{f}`, the spec as recorded"
                        for f in files)
