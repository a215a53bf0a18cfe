"""A `DiffReport` as text for a terminal and as Markdown for a pull-request comment.

Both print the severity of every changed file first, then the grouped rows, so
that they say the same thing; the JSON form is `DiffReport.to_json`. Markdown
folds each file's rows into a `<details>` section, worst file first, and stays
within GitHub's comment limit (65,536 characters): rows that do not fit are cut
from the least severe files, and a note says how many and where the rest is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .groups import Group
from .report import MARKS, SEVERITIES, DiffReport
from .changes import ADDED, REMOVED, short_pair, short_value

if TYPE_CHECKING:  # imported by `_environment`: only the Markdown output is a template
    import jinja2

# GitHub refuses a comment body longer than this many characters.
GITHUB_COMMENT_LIMIT = 65_536


def comment_length(text_: str) -> int:
    """Characters as the strictest counter counts them (UTF-16 units: an emoji is two), never fewer than
    Python's `len`, so a comment cut to the limit here fits whichever way the limit is counted."""
    return len(text_.encode("utf-16-le")) // 2
_KIND_MARK = {ADDED: "➕", REMOVED: "➖"}
_CHANGED_MARK = "✏️"


def text(report: DiffReport) -> list[str]:
    """Severity summary, one line per row (file by file, in path order), notes, the one-line summary."""
    if not report.changes:
        return [report.summary, *(f"note: {n}" for n in report.extra_notes)]
    width = max(len(s) for s in SEVERITIES)
    lines = [f"severity: {report.severity}"]
    lines += [f"  {v.severity:<{width}}  {v.file}: {v.reason}" for v in report.verdicts]
    for file in sorted(report.groups):
        for group in report.groups[file]:
            lines.append(group.render())
        if file in report.file_notes:
            lines.append(f"  note: {report.file_notes[file]}")
    lines += [f"note: {n}" for n in report.extra_notes]
    lines.append(report.summary)
    return lines


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
    rows = {v.file: [markdown_row(g) for g in report.groups[v.file]] for v in report.verdicts}

    def render(shown: dict[str, int]) -> str:
        sections = [
            {
                "verdict": v,
                "mark": MARKS[v.severity],
                "rows": rows[v.file][: shown[v.file]],
                "cut": len(rows[v.file]) - shown[v.file],
                "note": report.file_notes.get(v.file),
            }
            for v in report.verdicts
        ]
        cut = sum(s["cut"] for s in sections)
        cut_where = ", ".join(f"`{s['verdict'].file}`" for s in sections if s["cut"])
        return template.render(
            report=report,
            title=title,
            mark=MARKS[report.severity],
            sections=sections,
            marks=MARKS,
            cut=cut,
            cut_where=cut_where,
            total_rows=sum(len(r) for r in rows.values()),
            limit=limit,
        ).rstrip("\n")

    everything = {f: len(r) for f, r in rows.items()}
    full = render(everything)
    if comment_length(full) <= limit:
        return full
    # Keep rows in reading order (worst file first) while they fit beside the headers and the note.
    bare = comment_length(render({f: 0 for f in rows}))
    budget, shown = limit - bare - 200, {f: 0 for f in rows}
    for v in report.verdicts:
        for row in rows[v.file]:
            if budget < comment_length(row) + 1:
                break
            budget -= comment_length(row) + 1
            shown[v.file] += 1
        else:
            continue
        break
    out = render(shown)
    while comment_length(out) > limit and any(shown.values()):  # the estimate was short: give back rows from the end
        last = next(f for f in reversed(list(shown)) if shown[f])
        shown[last] -= 1
        out = render(shown)
    return out
