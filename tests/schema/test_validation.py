"""`mtpc.schema.validation.errors` reports exactly what plain jsonschema reports.

It remembers which `$ref` targets accepted which instances within one document (a package's
quantization.json repeats a few stored forms hundreds of times). The golden artifacts (written
by compile, held by tests/test_golden.py) and seeded broken copies of them are validated both
ways; the errors must be the same, at the same paths, in the same order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest

from mtpc.checks import schema_for
from mtpc.checks.onnx_genai import metadata_layout
from mtpc.schema.validation import errors, load_schema, read_yaml
from tests.fixtures.mutants import mutant

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _documents() -> list[tuple[str, str, object]]:
    found = []
    for path in sorted(GOLDEN.rglob("*")):
        if path.suffix not in (".json", ".yaml"):
            continue
        text = path.read_text("utf-8")
        doc = json.loads(text) if path.suffix == ".json" else read_yaml(text)
        layout = metadata_layout(doc) if path.name == "inference_metadata.yaml" else None
        schema = schema_for(path.name, layout)
        if schema is not None:
            found.append((str(path.relative_to(GOLDEN)), schema, doc))
    # mtpc tune's report, from one real run (tests/tuning/test_tune_report.py).
    report = GOLDEN.parent / "cases" / "tune" / "report.json"
    found.append(("../cases/tune/report.json", "tune_report.schema.json", json.loads(report.read_text("utf-8"))))
    return found


DOCUMENTS = _documents()


def _plain(schema: str, instance) -> list[tuple]:
    checker = jsonschema.Draft202012Validator(load_schema(schema), format_checker=jsonschema.FormatChecker())
    found = sorted(checker.iter_errors(instance), key=lambda e: (list(e.absolute_path), e.message))
    return [_shape(e) for e in found]


def _shape(e) -> tuple:
    return (tuple(e.absolute_path), e.message, e.validator, tuple(e.absolute_schema_path))


def _ours(schema: str, instance) -> list[tuple]:
    return sorted((_shape(e) for e in errors(schema, instance)), key=lambda s: (list(s[0]), s[1]))


_WRONG = ("", "not-a-value", -1, 0, 3, 1.5, True, None, [], {}, {"kind": "float"}, [1, "a"])


def _mutant(doc, rng: random.Random):
    return mutant(doc, rng, _WRONG, ("replace", "delete", "extra", "copy"))


def test_every_golden_artifact_has_a_schema_and_is_valid():
    assert {schema for _, schema, _ in DOCUMENTS} >= {"genai_config.schema.json", "quantization.schema.json",
                                                      "provenance.schema.json"}
    for name, schema, doc in DOCUMENTS:
        assert _ours(schema, doc) == _plain(schema, doc) == [], name


@pytest.mark.parametrize("name, schema, doc", DOCUMENTS, ids=[d[0] for d in DOCUMENTS])
def test_broken_copies_get_jsonschemas_errors(name, schema, doc):
    rng = random.Random(name)
    broken = 0
    for _ in range(40):
        mutant = _mutant(doc, rng)
        expected = _plain(schema, mutant)
        assert _ours(schema, mutant) == expected
        broken += bool(expected)
    assert broken >= 10  # the mutations do break documents


def test_a_repeated_broken_part_is_reported_every_time():
    doc = json.loads((GOLDEN / "qwen35-tiny-mtp" / "quantization.json").read_text("utf-8"))
    for weight in doc["weights"][:3]:
        weight["stored"] = {"kind": "MatMulNBits", "bits": 3, "block_size": 32}  # the same wrong form, three times
    found = _ours("quantization.schema.json", doc)
    assert found == _plain("quantization.schema.json", doc)
    assert {path[:2] for path, *_ in found} == {("weights", 0), ("weights", 1), ("weights", 2)}
