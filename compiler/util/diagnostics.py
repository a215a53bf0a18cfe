"""Errors users can act on, and the one exit-code table every verb shares.

A `Diagnostic` points at a place in an input file (`file:line:col`, the source
line and a caret under the span), in the style of xDSL / rustc. A `MtpcError`
carries one or more diagnostics and the exit code the CLI should return.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field


class ExitCode(enum.IntEnum):
    OK = 0  # nothing to report
    FINDINGS = 1  # invalid spec, non-empty diff, failed check
    USAGE = 2  # usage error or unreadable input
    INTERNAL = 3  # a bug in mtpc


@dataclass(frozen=True)
class Span:
    """A 1-based line/column range in a file; `end_col` is exclusive."""

    file: str
    line: int
    col: int
    end_col: int | None = None


@dataclass(frozen=True)
class Diagnostic:
    message: str
    span: Span | None = None
    severity: str = "error"  # "error" | "warning" | "note"
    hint: str | None = None
    # The JSON path / artifact path a finding is about, e.g. "genai_config.json:/model/mtp/filename".
    path: str | None = None
    # The text of the spanned line, so a diagnostic renders its caret without rereading the file.
    source_line: str | None = None

    def render(self, source_lines: list[str] | None = None) -> str:
        where = ""
        if self.span is not None:
            where = f"{self.span.file}:{self.span.line}:{self.span.col}: "
        elif self.path:
            where = f"{self.path}: "
        text = f"{where}{self.severity}: {self.message}"
        line = self._spanned_line(source_lines)
        if self.span is not None and line is not None:
            width = max(1, (self.span.end_col or self.span.col + 1) - self.span.col)
            gutter = f"{self.span.line:>4} | "
            text += f"\n{gutter}{line}\n{' ' * (len(gutter) + self.span.col - 1)}{'^' * width}"
        if self.hint:
            text += f"\n     = hint: {self.hint}"
        return text

    def _spanned_line(self, source_lines: list[str] | None) -> str | None:
        if self.span is None:
            return None
        if source_lines and 1 <= self.span.line <= len(source_lines):
            return source_lines[self.span.line - 1].rstrip("\n")
        return self.source_line

    def github(self, title: str, file: str | None = None) -> str:
        """This diagnostic as a GitHub Actions workflow command (`workflow_command`), at its span where it has one,
        else on `file` (the input it is about) when given."""
        span = self.span
        message = f"{self.path}: {self.message}" if self.path and span is None and self.path not in self.message else self.message
        return workflow_command(
            self.severity, message, title=title, hint=self.hint,
            file=span.file if span is not None else file,
            line=span.line if span is not None else None, col=span.col if span is not None else None,
        )

    def to_json(self) -> dict:
        out: dict = {"severity": self.severity, "message": self.message}
        if self.span is not None:
            out.update(file=self.span.file, line=self.span.line, column=self.span.col)
        if self.path:
            out["path"] = self.path
        if self.hint:
            out["hint"] = self.hint
        return out


def workflow_command(
    severity: str, message: str, *, title: str, hint: str | None = None,
    file: str | None = None, line: int | None = None, col: int | None = None,
) -> str:
    """One GitHub Actions workflow command (`::error file=F,line=L,col=C,title=T::message`): an annotation on
    `file` (relative to the working directory when inside it, as the checkout is) and its line where known.
    Errors are `::error`, warnings `::warning`, anything else (notes) `::notice`; the hint follows the message."""
    props = []
    if file is not None:
        props.append(f"file={_escape_property(relative_to_cwd(file))}")
        if line is not None:
            props.append(f"line={line}")
            if col is not None:
                props.append(f"col={col}")
    props.append(f"title={_escape_property(title)}")
    if hint:
        message += f"\nhint: {hint}"
    command = {"error": "error", "warning": "warning"}.get(severity, "notice")
    return f"::{command} {','.join(props)}::{_escape_data(message)}"


def relative_to_cwd(path: str) -> str:
    """`path` relative to the working directory when it lies inside it (as GitHub wants annotation paths), else absolute."""
    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute)
    except ValueError:  # another drive (Windows)
        return absolute
    return absolute if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative.replace(os.sep, "/")


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


@dataclass
class MtpcError(Exception):
    """A user-facing failure: rendered without a traceback."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    exit_code: ExitCode = ExitCode.FINDINGS

    @classmethod
    def single(cls, message: str, *, exit_code: ExitCode = ExitCode.FINDINGS, **kw) -> "MtpcError":
        return cls([Diagnostic(message, **kw)], exit_code)

    def __str__(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)


class SourceError(MtpcError):
    """The checkpoint cannot be read or does not hold what it claims (exit 2 unless stated)."""

    def __init__(self, message: str, *, exit_code: ExitCode = ExitCode.USAGE, path: str | None = None):
        super().__init__([Diagnostic(message, path=path)], exit_code)
