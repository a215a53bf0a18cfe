"""`mtpc.schema.verdict` answers exactly what jsonschema answers, or leaves the answer to it.

The predicate is trusted one way only (a sure "valid" skips jsonschema), but inside `not`, `oneOf`,
`if` and `contains` a "not valid" decides too, so both answers are compared with jsonschema's
`is_valid`: on every schema mtpc ships, against every golden artifact, every spec in the repository
and seeded broken copies of all of them; and on small schemas of each keyword against a pool of
awkward values (bools beside integers, 64.0 beside 64, NaN, non-string keys, nesting).
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from mtpc.schema.verdict import IGNORED, IMPLEMENTED, Undecided, accepts, equal, verdict
from mtpc.spec.schema_messages import spec_validator
from mtpc.schema.validation import errors, load_schema, schema_names
from tests.fixtures.mutants import mutant
from tests.schema.test_validation import DOCUMENTS

ROOT = Path(__file__).resolve().parents[2]


def _truth(schema, instance, strict: bool) -> bool:
    cls = spec_validator() if strict else jsonschema.Draft202012Validator
    return cls(schema).is_valid(instance)


def _answer(predicate, instance):
    try:
        return predicate(instance)
    except Undecided:
        return "undecided"


def test_every_schema_mtpc_ships_compiles():
    for name in schema_names():
        for strict in (False, True):
            assert verdict(load_schema(name), strict_integers=strict) is not None, name


def test_the_keywords_are_jsonschemas_own():
    known = set(jsonschema.Draft202012Validator.VALIDATORS)
    assert IMPLEMENTED <= known
    assert not IGNORED & known  # an ignored keyword jsonschema validates with would be a wrong "valid"
    # What jsonschema validates with and is not implemented makes a schema uncompiled, not ignored.
    for keyword in known - IMPLEMENTED:
        assert verdict({keyword: {}}) is None, keyword
    assert verdict({"x-unknown-keyword": 1}) is None


_WRONG = ("", "not-a-value", -1, 0, 3, 64.0, 1.5, float("nan"), 2**70, True, False, None, [], {}, {"kind": "float"},
          [1, "a"], ["a", "a"], {1: "integer key"}, "64")


def _mutant(doc, rng: random.Random):
    return mutant(doc, rng, _WRONG, ("replace", "delete", "extra", "copy", "retype"))


def _specs() -> list[tuple[str, object]]:
    found = []
    for path in sorted([*ROOT.joinpath("specs").glob("*.yaml"), *ROOT.joinpath("tests").rglob("*.yaml")]):
        if path.name in ("alias_bomb.yaml", "too_deep.yaml"):  # refused before any schema is applied
            continue
        try:
            doc = yaml.safe_load(path.read_text("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            continue
        if isinstance(doc, dict) and "mtpc" in doc:
            found.append((str(path.relative_to(ROOT)), doc))
    return found


SPECS = _specs()


def _compare(schema_name: str, doc, rng: random.Random, strict: bool, copies: int) -> dict:
    schema = load_schema(schema_name)
    predicate = verdict(schema, strict_integers=strict)
    tally = {True: 0, False: 0, "undecided": 0}
    for instance in [doc] + [_mutant(doc, rng) for _ in range(copies)]:
        ours = _answer(predicate, instance)
        tally[ours] += 1
        if ours != "undecided":
            assert ours == _truth(schema, instance, strict), instance
    return tally


@pytest.mark.parametrize("name, schema, doc", DOCUMENTS, ids=[d[0] for d in DOCUMENTS])
def test_artifacts_and_broken_copies_get_jsonschemas_answer(name, schema, doc):
    predicate = verdict(load_schema(schema))
    assert predicate(doc) is True  # every golden artifact is answered, and valid
    tally = _compare(schema, doc, random.Random(name), strict=False, copies=60)
    assert tally[False] >= 15 and tally[True] >= 2  # both answers were given, and checked


def test_specs_and_broken_copies_get_the_spec_validators_answer():
    assert len(SPECS) >= 30
    total = {True: 0, False: 0, "undecided": 0}
    for name, doc in SPECS:
        for answer, n in _compare("spec", doc, random.Random(name), strict=True, copies=40).items():
            total[answer] += n
    assert total[True] >= 200 and total[False] >= 600
    assert total["undecided"] <= total[False] // 20  # the corners left to jsonschema stay corners


def test_strict_integers_is_the_spec_validators_integer():
    schema = {"type": "integer", "minimum": 1}
    for value in (64, 64.0, True, "64", 0, 0.0):
        assert verdict(schema, strict_integers=True)(value) == _truth(schema, value, strict=True), value
        assert verdict(schema)(value) == _truth(schema, value, strict=False), value


# Each keyword on its own and in the combinations that decide with a "not valid" (not, oneOf, if).
KEYWORD_SCHEMAS = [
    True, False, {}, {"type": "integer"}, {"type": "number"}, {"type": ["string", "null"]}, {"type": "boolean"},
    {"type": "object"}, {"type": "array"}, {"enum": [1, "a", None, [1], {"a": 1}]}, {"enum": [True]}, {"enum": [1.0]},
    {"const": 0}, {"const": False}, {"const": [1, {"b": True}]}, {"minimum": 1}, {"maximum": 1.5},
    {"exclusiveMinimum": 0}, {"exclusiveMaximum": 3}, {"multipleOf": 2}, {"multipleOf": 0.5},
    {"minLength": 1}, {"maxLength": 2}, {"pattern": "^[a-z]+$"}, {"pattern": "b"},
    {"properties": {"a": {"type": "integer"}, "b": False}}, {"properties": {"a": True}, "additionalProperties": False},
    {"additionalProperties": {"type": "string"}}, {"patternProperties": {"^x": {"type": "integer"}}},
    {"patternProperties": {"^x": True}, "properties": {"x1": {"const": 1}}, "additionalProperties": False},
    {"required": ["a", "b"]}, {"propertyNames": {"pattern": "^[a-z]"}}, {"propertyNames": {"maxLength": 1}},
    {"minProperties": 1}, {"maxProperties": 1}, {"dependentRequired": {"a": ["b"]}},
    {"items": {"type": "integer"}}, {"prefixItems": [{"type": "string"}], "items": False},
    {"prefixItems": [True, {"const": 2}]}, {"minItems": 1}, {"maxItems": 1}, {"uniqueItems": True},
    {"contains": {"type": "integer"}}, {"contains": {"type": "integer"}, "minContains": 2},
    {"contains": {"const": 1}, "maxContains": 1}, {"contains": {"const": 1}, "minContains": 0},
    {"allOf": [{"type": "integer"}, {"minimum": 2}]}, {"anyOf": [{"type": "string"}, {"minimum": 2}]},
    {"oneOf": [{"type": "integer"}, {"minimum": 2}]}, {"not": {"type": "string"}}, {"not": {"required": ["a"]}},
    {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"required": ["c"]}},
    {"if": {"type": "integer"}, "then": {"minimum": 3}}, {"then": {"type": "string"}},
    {"$defs": {"n": {"type": "integer"}, "list": {"type": "array", "items": {"$ref": "#/$defs/node"}},
               "node": {"anyOf": [{"$ref": "#/$defs/n"}, {"$ref": "#/$defs/list"}]}}, "$ref": "#/$defs/node"},
    {"not": {"oneOf": [{"const": 1}, {"type": "integer"}]}}, {"not": {"uniqueItems": True}},
    {"not": {"enum": ["a", 1]}}, {"description": "no constraint", "title": "t", "default": 3},
]
VALUES = [
    None, True, False, 0, 1, 2, 3, -1, 1.0, 2.0, 0.5, 1.5, 64.0, float("nan"), float("inf"), 2**70, "", "a", "ab",
    "abc", "A", "b", "1", [], [1], [1, 1], [1, 2], ["a"], ["a", "a"], ["a", 2], [True, 1], [1, 1.0], [[1], [1]],
    [1, [2, [3]]], [1, "x"], {}, {"a": 1}, {"a": 1.0}, {"a": True}, {"a": 1, "b": 2}, {"b": 1}, {"c": 1},
    {"a": 1, "c": 2}, {"x1": 1}, {"x1": 2}, {"xx": "s"}, {"y": "s"}, {"y": 1}, {1: "k"}, {"A": 1}, {"ab": 1},
    {"b": True}, [1, {"b": True}], [1, {"b": 1}], [True], [1.0], {"a": 1.0, "b": None},
]


@pytest.mark.parametrize("schema", KEYWORD_SCHEMAS, ids=[json.dumps(s)[:60] for s in KEYWORD_SCHEMAS])
def test_each_keyword_answers_as_jsonschema(schema):
    predicate = verdict(schema)
    assert predicate is not None
    for value in VALUES:
        ours = _answer(predicate, value)
        if ours == "undecided":
            continue
        try:
            truth = _truth(schema, value, strict=False)
        except Exception:  # jsonschema fails on it (re.search over an integer key): ours must not say valid
            assert ours is not True or not accepts(predicate, value)
            continue
        assert ours == truth, value


def test_equal_is_jsonschemas_equal():
    from jsonschema._utils import equal as theirs

    for one in VALUES:
        for two in VALUES:
            assert equal(one, two) == theirs(one, two), (one, two)


def test_what_is_not_implemented_is_left_to_jsonschema():
    assert verdict({"format": "email"}) is None
    assert verdict({"$ref": "other.json#/x"}) is None
    assert verdict({"$defs": {"a": {"$id": "inner"}}, "$ref": "#/$defs/a"}) is None
    assert verdict({"pattern": "("}) is None  # not a regex: jsonschema says what it makes of it
    assert verdict({"anyOf": []}) is None
    assert not accepts(None, {})
    assert _answer(verdict({"uniqueItems": True}), [[1], [2]]) == "undecided"
    assert _answer(verdict({"patternProperties": {"^a": True}}), {1: 2}) == "undecided"


def test_errors_of_a_valid_document_need_no_jsonschema_and_of_an_invalid_one_are_jsonschemas():
    doc = json.loads((ROOT / "tests/golden/qwen35-tiny-mtp/genai_config.json").read_text("utf-8"))
    probe = (
        "import json, sys\n"
        "from mtpc.schema.validation import errors\n"
        f"doc = json.loads({json.dumps(json.dumps(doc))})\n"
        "assert errors('genai_config', doc) == []\n"
        "print('jsonschema' in sys.modules)\n"
    )
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "False\n"
    broken = copy.deepcopy(doc)
    broken["model"]["context_length"] = "long"
    found = [(list(e.absolute_path), e.message) for e in errors("genai_config", broken)]
    plain = jsonschema.Draft202012Validator(load_schema("genai_config")).iter_errors(broken)
    assert found == sorted(((list(e.absolute_path), e.message) for e in plain), key=lambda x: (str(x[0]), x[1]))
    assert found


def test_a_repeated_part_is_answered_for_what_it_is_each_time():
    """`$ref` answers are remembered per equal mapping within one document, never across documents."""
    doc = json.loads((ROOT / "tests/golden/qwen35-tiny-mtp/quantization.json").read_text("utf-8"))
    predicate = verdict(load_schema("quantization"))
    assert accepts(predicate, doc)
    broken = copy.deepcopy(doc)
    broken["weights"][-1]["stored"] = dict(broken["weights"][0]["stored"], bits=3)  # like the others, but wrong
    assert not accepts(predicate, broken)
    assert not _truth(load_schema("quantization"), broken, strict=False)
    assert accepts(predicate, doc)  # and the next document starts afresh
    recursive = {"$defs": {"t": {"type": "object", "properties": {"k": {"$ref": "#/$defs/t"}, "v": {"type": "integer"}}}},
                 "$ref": "#/$defs/t"}
    tree = {"k": {"k": {"v": 1}, "v": 1}, "v": 1}
    assert accepts(verdict(recursive), tree)
    assert not accepts(verdict(recursive), {"k": {"k": {"v": "x"}, "v": 1}, "v": 1})
