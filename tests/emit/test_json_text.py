"""`dumps_sorted` writes json.dumps's own text (sort_keys, ensure_ascii=False, allow_nan=False, indent=2),
and where it would differ from json (keys that are not strings, NaN, unknown types, cycles) json writes
or refuses it itself."""

from __future__ import annotations

import enum
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from mtpc.emit.json_text import dumps_sorted

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _theirs(doc) -> str:
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False, indent=2)


def test_every_golden_json_file_is_written_as_json_writes_it():
    files = sorted(GOLDEN.rglob("*.json"))
    assert len(files) >= 10
    for path in files:
        doc = json.loads(path.read_text("utf-8"))
        assert dumps_sorted(doc) == _theirs(doc), path


_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_documents = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_documents)
def test_any_json_document_is_written_as_json_writes_it(doc):
    assert dumps_sorted(doc) == _theirs(doc)


class Color(enum.IntEnum):
    RED = 1


class Plain(enum.Enum):
    A = "a"


def _outcome(function, doc):
    try:
        return ("text", function(doc))
    except Exception as error:  # noqa: BLE001 - the very exception json raises is the expectation
        return (type(error), str(error))


@pytest.mark.parametrize("doc", [
    {"z": 1, "a": [1.5, -0.0, 1e300, 5e-324, 2**80, True, None, "é\n\"\\\x00\u2028"]},
    {"int enum": Color.RED, "nested": {"": [], "x": {}}, "tuple": (1, (2,))},
    {1: "an integer key"}, {True: "a bool key", "b": 2}, {None: 1}, {1.5: "a float key"},
    {"nan": float("nan")}, [float("inf")], {"enum": Plain.A}, {"set": {1}}, {"bytes": b"x"},
    "top-level string", 3, None, [],
])
def test_unusual_documents_get_jsons_text_or_jsons_error(doc):
    assert _outcome(dumps_sorted, doc) == _outcome(_theirs, doc)


def test_a_cycle_or_a_deep_document_is_jsons_to_refuse_or_write():
    cycle: list = []
    cycle.append(cycle)
    assert _outcome(dumps_sorted, cycle) == _outcome(_theirs, cycle)
    deep: list = []
    for _ in range(500):
        deep = [deep]
    assert dumps_sorted(deep) == _theirs(deep)
