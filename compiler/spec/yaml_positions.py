"""YAML text -> plain data, plus where every key and value sits in the text.

PyYAML's constructor forgets positions, so we compose the document into nodes
and build the data ourselves, recording a `NodeSpan` for each JSON path. Two
departures from PyYAML's YAML 1.1 defaults, both to match what people mean:

- only `true` / `false` are booleans (YAML 1.2): in 1.1 `head: on` would be the
  boolean True, not the string `on` the spec format asks for;
- `1e-6` is a float (YAML 1.2): in 1.1 a float needs a dot, so `rms_norm_eps:
  1e-6` would silently be the string "1e-6".

Duplicate mapping keys, which PyYAML accepts silently (last one wins), are
reported as diagnostics; the first occurrence is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from ..diagnostics import Diagnostic, Span

JsonPath = tuple  # of str (mapping keys) and int (list indices)

_BOOL = "tag:yaml.org,2002:bool"
_FLOAT = "tag:yaml.org,2002:float"


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema booleans and floats."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Yaml12Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
                |[0-9][0-9_]*[eE][-+]?[0-9]+
                |\.(?:inf|Inf|INF))
            |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def dotted(path: JsonPath) -> str:
    """`("quantization", "overrides", 0, "bits")` -> `quantization.overrides[0].bits`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the spec"


@dataclass(frozen=True)
class NodeSpan:
    """Where one value sits. `key` is the mapping key naming it (None for the root and list items).

    `value` covers the value's first line; `multiline` says the value goes on past it.
    """

    key: Span | None
    value: Span
    multiline: bool


class _Builder:
    def __init__(self, file: str, lines: list[str]):
        self.file = file
        self.lines = lines
        self.spans: dict[JsonPath, NodeSpan] = {}
        self.problems: list[Diagnostic] = []
        self._constructor = _Yaml12Loader("")
        self._open: set[int] = set()  # collections being built, to stop recursive aliases

    def span(self, start: yaml.Mark, end: yaml.Mark) -> tuple[Span, bool]:
        if end.line == start.line and end.column > start.column:
            return Span(self.file, start.line + 1, start.column + 1, end.column + 1), False
        text = self.lines[start.line] if start.line < len(self.lines) else ""
        end_col = max(len(text.rstrip()), start.column + 1) + 1
        return Span(self.file, start.line + 1, start.column + 1, end_col), True

    def line_of(self, span: Span) -> str:
        return self.lines[span.line - 1] if span.line - 1 < len(self.lines) else ""

    def build(self, node: yaml.Node, path: JsonPath, key: Span | None) -> Any:
        value_span, multiline = self.span(node.start_mark, node.end_mark)
        self.spans[path] = NodeSpan(key, value_span, multiline)
        if isinstance(node, yaml.ScalarNode):
            return self._constructor.construct_object(node, deep=True)
        if id(node) in self._open:
            self.problems.append(
                Diagnostic("an alias refers to the collection it is in", value_span, source_line=self.line_of(value_span))
            )
            return None
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            return [self.build(item, path + (i,), None) for i, item in enumerate(node.value)]
        finally:
            self._open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: JsonPath) -> dict:
        out: dict[str, Any] = {}
        first_seen: dict[str, Span] = {}
        for key_node, value_node in node.value:
            key_span, _ = self.span(key_node.start_mark, key_node.end_mark)
            if not isinstance(key_node, yaml.ScalarNode):
                self.problems.append(
                    Diagnostic("mapping keys must be plain names", key_span, source_line=self.line_of(key_span))
                )
                continue
            # JSON keys are strings: `1:` or `true:` name the key "1" / "true".
            name = key_node.value
            if name in first_seen:
                earlier = first_seen[name]
                self.problems.append(
                    Diagnostic(
                        f"duplicate key '{name}'",
                        key_span,
                        hint=f"'{name}' is already set on line {earlier.line}; keep one of them",
                        source_line=self.line_of(key_span),
                    )
                )
                continue
            first_seen[name] = key_span
            out[name] = self.build(value_node, path + (name,), key_span)
        return out


@dataclass(frozen=True)
class ParsedYaml:
    data: Any
    spans: dict[JsonPath, NodeSpan]
    problems: tuple[Diagnostic, ...]  # duplicate keys and other structural mistakes


def parse(text: str, file: str) -> ParsedYaml:
    """Parse one YAML document. Raises `yaml.YAMLError` when the text is not YAML."""
    loader = _Yaml12Loader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    builder = _Builder(file, text.splitlines())
    data = None if node is None else builder.build(node, (), None)
    return ParsedYaml(data, builder.spans, tuple(builder.problems))
