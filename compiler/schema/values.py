"""JSON values as jsonschema 4 compares and types them, for `verdict`'s compiled schemas.

Kept beside the compiler rather than in it: these are jsonschema's rules about values (`_utils.equal`,
`_utils.uniq`, the draft 2020-12 type checker), the compiler is its rules about keywords.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Callable

Predicate = Callable[[Any], bool]


class Undecided(Exception):
    """This document's answer is left to jsonschema."""


# ----------------------------------------------------------------------------- equality, as jsonschema's


def _unbool(element, true=object(), false=object()):
    if element is True:
        return true
    if element is False:
        return false
    return element


def equal(one, two) -> bool:
    """jsonschema's `_utils.equal`: bools are not numbers, sequences and mappings compared item by item."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return one == two
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(equal(i, j) for i, j in zip(one, two))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(key in two and equal(value, two[key]) for key, value in one.items())
    return _unbool(one) == _unbool(two)


# ----------------------------------------------------------------------------- types, as draft 2020-12's


def is_number(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, numbers.Number)


def is_integer(x) -> bool:
    return not isinstance(x, bool) and (isinstance(x, int) or (isinstance(x, float) and x.is_integer()))


def is_strict_integer(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


TYPES: dict[str, Predicate] = {
    "array": lambda x: isinstance(x, list),
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "number": is_number,
    "object": lambda x: isinstance(x, dict),
    "string": lambda x: isinstance(x, str),
}


def all_unique(items: list) -> bool:
    """jsonschema's `uniq` for lists of strings or of integers (the only ones answered here)."""
    if all(type(i) is str for i in items) or all(type(i) is int for i in items):
        return len(set(items)) == len(items)
    raise Undecided
