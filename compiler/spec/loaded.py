"""A spec as read: its data as written (no defaults filled in), its lines, and where each part sits.

Rules, schema messages and lowering point their diagnostics through it; `loader` makes one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from ..util.diagnostics import Diagnostic, Span
from .yaml_positions import JsonPath, NodeSpan, dotted


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
