"""`json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False, indent=2)`, the same text, faster.

With `indent`, Python's json module encodes in pure Python, through a generator per container
(its C encoder writes compact text only): a package's `quantization.json` of 866 weights costs
every `check SPEC`, `plan` and `diff SPEC SPEC` a hundredth of a second that way. This writes
the same characters by plain recursion, each string escaped by json's own (C) escaper and each
number by the `repr` json uses. Anything it does not handle the way json does (a key that is not
a string, a float that is not finite, a type json would hand to `default`, a cycle) is left to
`json.dumps` itself, which gives its own text or error (tests/emit/test_json_text.py compares).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any


class _Unusual(Exception):
    pass


_INF = float("inf")


def dumps_sorted(doc: Any) -> str:
    """The text of `json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False, indent=2)`."""
    parts: list[str] = []
    try:
        _encode(doc, "\n", parts.append, 0)
    except (_Unusual, RecursionError):
        return json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False, indent=2)
    return "".join(parts)


_MAX_DEPTH = 200  # deeper documents (or cycles) are json.dumps's to write, or to refuse


def _encode(value: Any, newline: str, add, depth: int) -> None:
    # The order of json.encoder's `_iterencode`: str, None, True, False, int, float, list / tuple, dict.
    if isinstance(value, str):
        add(encode_basestring(value))
    elif value is None:
        add("null")
    elif value is True:
        add("true")
    elif value is False:
        add("false")
    elif isinstance(value, int):
        add(int.__repr__(value))
    elif isinstance(value, float):
        if value != value or value == _INF or value == -_INF:
            raise _Unusual  # json refuses it (allow_nan=False), with its own message
        add(float.__repr__(value))
    elif isinstance(value, (list, tuple)):
        if not value:
            add("[]")
            return
        if depth >= _MAX_DEPTH:
            raise _Unusual
        inner = newline + "  "
        first = True
        for item in value:
            add("[" + inner if first else "," + inner)
            first = False
            _encode(item, inner, add, depth + 1)
        add(newline + "]")
    elif isinstance(value, dict):
        if not value:
            add("{}")
            return
        if depth >= _MAX_DEPTH:
            raise _Unusual
        if not all(type(key) is str for key in value):
            raise _Unusual  # json converts such keys (and sorts them as they are): its own rules
        inner = newline + "  "
        first = True
        for key in sorted(value):
            add(("{" if first else ",") + inner + encode_basestring(key) + ": ")
            first = False
            _encode(value[key], inner, add, depth + 1)
        add(newline + "}")
    else:
        raise _Unusual  # json hands it to `default`, which refuses it
