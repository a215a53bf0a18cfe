"""Where a JSON pointer sits in the text of a package's JSON or YAML file, for findings with line numbers.

`json.loads` and PyYAML's constructor forget positions, so the text is read a second
time, only for a finding's sake: JSON by a small scanner over the same grammar, YAML
through PyYAML's composed nodes. Each pointer maps to the (line, column), 1-based, of
its key (an object member) or of its value (an array item, the whole document), which
is where an editor or a GitHub annotation should point. A text that cannot be read is
mapped to nothing: the finding keeps its JSON path and has no line.
"""

from __future__ import annotations

import bisect
import json.decoder
import re

import yaml

from ..schema.validation import json_pointer

Positions = dict[str, tuple[int, int]]

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")
# Deeper than any config is nested; a document deeper still gets no positions rather than a RecursionError.
_MAX_DEPTH = 200


def positions(relpath: str, text: str) -> Positions:
    """Pointer -> (line, column) for a `.json` or `.yaml` / `.yml` file; {} for other files or unreadable text."""
    try:
        if relpath.endswith(".json"):
            return _JsonScanner(text).scan()
        if relpath.endswith((".yaml", ".yml")):
            return _yaml_positions(text)
    except (ValueError, IndexError, RecursionError, yaml.YAMLError):
        pass
    return {}


def locate(found: Positions, pointer: str) -> tuple[int, int] | None:
    """The position of `pointer`, or of its nearest parent the text spells out (a missing key: where it belongs)."""
    while True:
        if pointer in found:
            return found[pointer]
        if not pointer:
            return None
        pointer = pointer[: pointer.rfind("/")]


class _JsonScanner:
    def __init__(self, text: str):
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.found: Positions = {}

    def scan(self) -> Positions:
        end = self._value(_WHITESPACE.match(self.text, 0).end(), "", 0)
        if _WHITESPACE.match(self.text, end).end() != len(self.text):
            raise ValueError("text after the document")
        return self.found

    def _at(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def _skip(self, offset: int) -> int:
        return _WHITESPACE.match(self.text, offset).end()

    def _value(self, i: int, pointer: str, depth: int) -> int:
        if depth > _MAX_DEPTH:
            raise ValueError("nested too deep")
        self.found.setdefault(pointer, self._at(i))
        char = self.text[i]
        if char == "{":
            return self._object(i + 1, pointer, depth)
        if char == "[":
            return self._array(i + 1, pointer, depth)
        if char == '"':
            return json.decoder.scanstring(self.text, i + 1)[1]
        scalar = _SCALAR.match(self.text, i)
        if scalar is None:
            raise ValueError(f"no JSON value at offset {i}")
        return scalar.end()

    def _object(self, i: int, pointer: str, depth: int) -> int:
        i = self._skip(i)
        if self.text[i] == "}":
            return i + 1
        while True:
            if self.text[i] != '"':
                raise ValueError(f"no key at offset {i}")
            key, after = json.decoder.scanstring(self.text, i + 1)
            member = pointer + json_pointer(key)
            self.found.setdefault(member, self._at(i))
            i = self._skip(after)
            if self.text[i] != ":":
                raise ValueError(f"no ':' at offset {i}")
            # The member's position stays its key's: setdefault in _value keeps it.
            i = self._skip(self._value(self._skip(i + 1), member, depth + 1))
            if self.text[i] == "}":
                return i + 1
            if self.text[i] != ",":
                raise ValueError(f"no ',' at offset {i}")
            i = self._skip(i + 1)

    def _array(self, i: int, pointer: str, depth: int) -> int:
        i = self._skip(i)
        if self.text[i] == "]":
            return i + 1
        index = 0
        while True:
            i = self._skip(self._value(i, pointer + json_pointer(index), depth + 1))
            if self.text[i] == "]":
                return i + 1
            if self.text[i] != ",":
                raise ValueError(f"no ',' at offset {i}")
            i, index = self._skip(i + 1), index + 1


_MAX_YAML_NODES = 100_000
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml_positions(text: str) -> Positions:
    found: Positions = {}
    root = yaml.compose(text, Loader=_LOADER)
    if root is None:
        return found
    stack = [(root, "", root.start_mark)]
    while stack:
        node, pointer, mark = stack.pop()
        found.setdefault(pointer, (mark.line + 1, mark.column + 1))
        if len(found) > _MAX_YAML_NODES:  # aliases can repeat a subtree without end: positions are not worth that
            break
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    stack.append((value, pointer + json_pointer(key.value), key.start_mark))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                stack.append((item, pointer + json_pointer(index), item.start_mark))
    return found
