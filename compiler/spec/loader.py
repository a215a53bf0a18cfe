"""Read a spec file: YAML with positions, checked against schemas/spec.schema.json.

Every mistake found is reported at once, sorted by position, each pointing at
the offending key or value: schema errors, and the cross-field rules of the
sections that are schema-valid (a rule over a section with a schema error runs
once that error is fixed). Exit codes: an unreadable file or text that is not
YAML is a usage error (2); YAML that is not a valid spec is a finding (1).
Text a spec never needs (more than `MAX_SPEC_BYTES`, nesting deeper than
`yaml_positions.MAX_DEPTH`, aliases expanding past `yaml_positions.MAX_VALUES`)
is refused as unreadable (2), at its place in the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from ..diagnostics import Diagnostic, ExitCode, MtpcError, Span
from ..validation import load_schema
from . import rules, yaml_positions
from .defaults import apply_defaults
from .schema_messages import invalid_sections, schema_diagnostics
from .yaml_positions import JsonPath, LimitExceeded, NodeSpan, dotted

# The shipped specs are 1-3 KB; a megabyte is no spec but a mistake (or an attack), refused unread.
MAX_SPEC_BYTES = 1 << 20


@dataclass(frozen=True)
class LoadedSpec:
    """A schema-valid spec as written (no defaults filled in), with where each part of it sits."""

    data: dict
    spans: Mapping[JsonPath, NodeSpan]
    lines: tuple[str, ...]
    path: Path  # as given by the caller, so diagnostics name the file the way the user did

    @property
    def folder(self) -> Path:
        """The folder relative source paths are resolved against."""
        return self.path.resolve().parent

    def span(self, path: JsonPath, *, at: Literal["value", "key"] = "value") -> Span:
        """Where `path` sits; a path the spec does not spell out falls back to its nearest written parent's key."""
        written = path
        while written and written not in self.spans:
            written = written[:-1]
        node = self.spans.get(written)
        if node is None:  # an empty document
            return Span(str(self.path), 1, 1, 2)
        if written != path or at == "key" or node.multiline:
            return node.key or node.value
        return node.value

    def diagnostic(
        self, path: JsonPath, message: str, *, at: Literal["value", "key"] = "value", hint: str | None = None
    ) -> Diagnostic:
        span = self.span(path, at=at)
        line = self.lines[span.line - 1] if 0 < span.line <= len(self.lines) else None
        return Diagnostic(message, span, hint=hint, path=dotted(path), source_line=line)

    def get(self, path: JsonPath, default: Any = None) -> Any:
        """The value written at `path`, or `default` when the spec does not write it."""
        value: Any = self.data
        for part in path:
            try:
                value = value[part]
            except (KeyError, IndexError, TypeError):
                return default
        return value


def by_position(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    def key(d: Diagnostic):
        span = d.span
        return (span.line, span.col, d.message) if span else (0, 0, d.message)

    return sorted(diagnostics, key=key)


def load_spec(path: str | os.PathLike) -> LoadedSpec:
    path = Path(path)
    text = _read_text(path)
    try:
        parsed = yaml_positions.parse(text, str(path))
    except yaml.MarkedYAMLError as err:
        raise MtpcError([_yaml_error(err, path, text)], ExitCode.USAGE) from err
    except LimitExceeded as err:
        raise MtpcError([_marked(err.message, err.mark, err.hint, path, text)], ExitCode.USAGE) from None
    except yaml.YAMLError as err:
        raise MtpcError.single(f"not valid YAML: {err}", exit_code=ExitCode.USAGE, path=str(path)) from err
    spec = LoadedSpec(parsed.data, parsed.spans, tuple(text.splitlines()), path)
    # A value the parser refused (NaN, an unreadable number) is null to the schema: say it once.
    refused = {d.span for d in parsed.problems}
    problems = list(parsed.problems) + [d for d in schema_diagnostics(spec) if d.span not in refused]
    if problems:
        broken = invalid_sections(spec)
        if broken is not None:
            problems += rules.check(spec, apply_defaults(load_schema("spec"), spec.data), skip=broken)
        raise MtpcError(by_position(problems), ExitCode.FINDINGS)
    return spec


def _read_text(path: Path) -> str:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise MtpcError.single(f"spec file not found: {path}", exit_code=ExitCode.USAGE, path=str(path)) from None
    except IsADirectoryError:
        raise MtpcError.single(
            f"spec path is a folder, not a file: {path}", exit_code=ExitCode.USAGE, path=str(path)
        ) from None
    except OSError as err:
        raise MtpcError.single(
            f"cannot read spec file {path}: {err.strerror}", exit_code=ExitCode.USAGE, path=str(path)
        ) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise MtpcError.single(
            f"spec file is larger than {MAX_SPEC_BYTES >> 20} MiB: {path}",
            exit_code=ExitCode.USAGE,
            path=str(path),
            hint="a spec names its checkpoint; it does not hold it",
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise MtpcError.single(
            f"spec file is not UTF-8 text (invalid byte at offset {err.start})",
            exit_code=ExitCode.USAGE,
            path=str(path),
        ) from None


def _yaml_error(err: yaml.MarkedYAMLError, path: Path, text: str) -> Diagnostic:
    mark = err.problem_mark or err.context_mark
    problem = err.problem or err.context or "unreadable"
    hint = None
    if err.context and err.problem and err.context_mark is not None:
        hint = f"{err.context} that starts on line {err.context_mark.line + 1}"
        if "block" in err.context:  # PyYAML's words for a mapping or list laid out by indentation
            hint += "; check the indentation"
    return _marked(f"not valid YAML: {problem}", mark, hint, path, text)


def _marked(message: str, mark: yaml.Mark | None, hint: str | None, path: Path, text: str) -> Diagnostic:
    if mark is None:
        return Diagnostic(message, path=str(path), hint=hint)
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    span = Span(str(path), mark.line + 1, mark.column + 1, mark.column + 2)
    return Diagnostic(message, span, hint=hint, source_line=line)
