"""YAML text -> plain data, plus where every key and value sits in the text.

PyYAML's constructor forgets positions, so we compose the document into nodes
and build the data ourselves, recording a `NodeSpan` for each JSON path. Two
departures from PyYAML's YAML 1.1 defaults, both to match what people mean:

- only `true` / `false` are booleans (YAML 1.2): in 1.1 `head: on` would be the
  boolean True, not the string `on` the spec format asks for;
- `1e-6` is a float (YAML 1.2): in 1.1 a float needs a dot, so `rms_norm_eps:
  1e-6` would silently be the string "1e-6".

Duplicate mapping keys, which PyYAML accepts silently (last one wins), are
reported as diagnostics; the first occurrence is kept. So are numbers JSON cannot
hold (`.nan`, `.inf`) and numbers too long to read.

Hostile text is refused, not followed: collections nested deeper than
`MAX_DEPTH`, and documents whose aliases (`*name`) expand to more than
`MAX_VALUES` values ("billion laughs"), raise `LimitExceeded` at the place in
the text, before Python's recursion or the memory gives out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from ..util.diagnostics import Diagnostic, Span

JsonPath = tuple  # of str (mapping keys) and int (list indices)

# A spec is five levels deep (source.synthetic.rope.mrope_section[0]) and holds about a hundred values.
MAX_DEPTH = 32
MAX_VALUES = 10_000

_BOOL = "tag:yaml.org,2002:bool"
_FLOAT = "tag:yaml.org,2002:float"


class LimitExceeded(Exception):
    """The text asks for more than a spec can hold; `mark` is where (a PyYAML mark, 0-based)."""

    def __init__(self, message: str, mark: yaml.Mark, hint: str | None = None):
        super().__init__(message)
        self.message, self.mark, self.hint = message, mark, hint


def _too_deep(mark: yaml.Mark) -> LimitExceeded:
    return LimitExceeded(
        f"collections nested more than {MAX_DEPTH} deep", mark, hint="a spec nests five levels at most; check the brackets"
    )


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema booleans and floats, a bounded nesting depth and node count.

    PyYAML's composer recurses once per level, so without the bound deep nesting is a RecursionError.
    """

    _depth = 0
    _nodes = 0

    def compose_node(self, parent, index):
        if self._depth >= MAX_DEPTH + 1:  # + 1: the scalars at the deepest allowed level
            raise _too_deep(self.peek_event().start_mark)
        self._nodes += 1  # PyYAML is slow: stop a long document early, not once it is all read
        if self._nodes > MAX_VALUES:
            raise LimitExceeded(f"the spec holds more than {MAX_VALUES} values", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


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
        self._built: set[int] = set()  # collections built once: building one again expands an alias
        self._repeat: yaml.Node | None = None  # the outermost alias being expanded
        self._count = 0

    def span(self, start: yaml.Mark, end: yaml.Mark) -> tuple[Span, bool]:
        if end.line == start.line and end.column > start.column:
            return Span(self.file, start.line + 1, start.column + 1, end.column + 1), False
        text = self.lines[start.line] if start.line < len(self.lines) else ""
        end_col = max(len(text.rstrip()), start.column + 1) + 1
        return Span(self.file, start.line + 1, start.column + 1, end_col), True

    def line_of(self, span: Span) -> str:
        return self.lines[span.line - 1] if span.line - 1 < len(self.lines) else ""

    def build(self, node: yaml.Node, path: JsonPath, key: Span | None) -> Any:
        if len(path) > MAX_DEPTH:  # aliases can nest deeper than the text does
            raise _too_deep(node.start_mark)
        self._count += 1
        if self._count > MAX_VALUES:
            where = self._repeat or node
            raise LimitExceeded(
                f"the spec expands to more than {MAX_VALUES} values",
                where.start_mark,
                hint="aliases (*name) repeat everything their anchor (&name) holds; write the values out instead",
            )
        value_span, multiline = self.span(node.start_mark, node.end_mark)
        self.spans[path] = NodeSpan(key, value_span, multiline)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, value_span)
        if id(node) in self._open:
            self.problems.append(
                Diagnostic("an alias refers to the collection it is in", value_span, source_line=self.line_of(value_span))
            )
            return None
        outermost = self._repeat is None and id(node) in self._built
        if outermost:
            self._repeat = node
        self._built.add(id(node))
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            return [self.build(item, path + (i,), None) for i, item in enumerate(node.value)]
        finally:
            self._open.discard(id(node))
            if outermost:
                self._repeat = None

    def _scalar(self, node: yaml.ScalarNode, span: Span) -> Any:
        try:
            value = self._constructor.construct_object(node, deep=True)
        except ValueError:  # e.g. an integer of more than 4300 digits (Python's int parsing limit)
            self.problems.append(Diagnostic("this number is too long to read", span, source_line=self.line_of(span)))
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.problems.append(
                Diagnostic(
                    f"'{node.value}' is not a number a spec can hold",
                    span,
                    hint="JSON, and so the spec format, has no NaN or infinity",
                    source_line=self.line_of(span),
                )
            )
            return None
        return value

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
    """Parse one YAML document.

    Raises `yaml.YAMLError` when the text is not YAML, `LimitExceeded` when it nests or expands too far.
    """
    loader = _Yaml12Loader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    builder = _Builder(file, text.splitlines())
    data = None if node is None else builder.build(node, (), None)
    return ParsedYaml(data, builder.spans, tuple(builder.problems))
