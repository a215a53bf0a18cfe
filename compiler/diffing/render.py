"""A `DiffReport` as text for a terminal, and as Markdown for a pull-request comment (`comment`).

Both print what the spec itself changed and the severity of every changed file first, then the grouped rows,
so that they say the same thing; the JSON form is `DiffReport.to_json`. The text prints every row; the
comment stays within GitHub's limit (see `comment`).
"""

from __future__ import annotations

from .comment import GITHUB_COMMENT_LIMIT, cell, comment_length, markdown, markdown_row  # noqa: F401  (the API)
from .report import SEVERITIES, DiffReport


def text(report: DiffReport) -> list[str]:
    """Severity summary, one line per row (file by file, in path order; the compiled spec's settings first),
    notes, the one-line summary."""
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
