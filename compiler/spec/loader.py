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
from pathlib import Path

import yaml

from ..util.diagnostics import Diagnostic, ExitCode, MtpcError, Span
from ..schema.validation import load_schema
from . import rules, yaml_positions
from .defaults import apply_defaults
from .schema_messages import invalid_sections, schema_diagnostics
from .loaded import LoadedSpec
from .yaml_positions import LimitExceeded

# The shipped specs are 1-3 KB; a megabyte is no spec but a mistake (or an attack), refused unread.
MAX_SPEC_BYTES = 1 << 20

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
