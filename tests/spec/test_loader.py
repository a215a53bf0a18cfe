"""The spec loader: positions, YAML 1.2 scalars, collected schema errors, exit codes."""

import json
import re
from pathlib import Path

import pytest

from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.spec.loader import load_spec
from mtpc.schema.validation import load_schema

REPO = Path(__file__).resolve().parents[2]

MINIMAL = "mtpc: 1\nname: tiny\nsource:\n  synthetic:\n    seed: 7\n"


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def failure(path) -> MtpcError:
    with pytest.raises(MtpcError) as caught:
        load_spec(path)
    return caught.value


def test_spans_point_at_keys_and_values(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL + "    hidden_size: 64\nmtp: {head: off}\n"))
    size = spec.spans[("source", "synthetic", "hidden_size")]
    # line 6 is "    hidden_size: 64": the key starts at column 5, the value at column 18
    assert (size.key.line, size.key.col, size.key.end_col) == (6, 5, 16)
    assert (size.value.line, size.value.col, size.value.end_col) == (6, 18, 20)
    head = spec.spans[("mtp", "head")]
    assert (head.value.line, head.value.col, head.value.end_col) == (7, 13, 16)


def test_a_block_value_is_pointed_at_by_its_key(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    span = spec.span(("source", "synthetic"))
    assert (span.line, span.col, span.end_col) == (4, 3, 12)


def test_unwritten_paths_fall_back_to_the_nearest_written_key(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    span = spec.span(("source", "synthetic", "rope", "theta"))
    assert (span.line, span.col) == (4, 3)


def test_diagnostics_name_the_file_as_given(tmp_path, monkeypatch):
    write(tmp_path, MINIMAL + "    hidden: 64\n")
    monkeypatch.chdir(tmp_path)
    err = failure("spec.yaml")
    assert str(err).startswith("spec.yaml:6:5: error: unknown key 'hidden' in source.synthetic")


def test_on_and_off_are_strings_not_booleans(tmp_path):
    # YAML 1.1 reads `on` as True; the spec format means the string.
    spec = load_spec(write(tmp_path, MINIMAL + "mtp: {head: on}\n"))
    assert spec.data["mtp"]["head"] == "on"


def test_yes_is_not_a_boolean(tmp_path):
    err = failure(write(tmp_path, MINIMAL + "    tie_word_embeddings: yes\n"))
    assert "tie_word_embeddings must be a boolean (true or false), not the string 'yes'" in str(err)


def test_exponent_without_dot_is_a_float(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL + "    rms_norm_eps: 1e-6\n    rope: {theta: 1e7}\n"))
    assert spec.data["source"]["synthetic"]["rms_norm_eps"] == pytest.approx(1e-6)
    assert spec.data["source"]["synthetic"]["rope"]["theta"] == 1e7


def test_a_float_is_not_an_integer(tmp_path):
    err = failure(write(tmp_path, MINIMAL + "    hidden_size: 64.0\n"))
    assert "hidden_size must be an integer, not the number 64.0" in str(err)


def test_every_error_is_reported_in_file_order(tmp_path):
    text = (
        "mtpc: 1\nname: x\nsource:\n  synthetic:\n    seed: -1\n    vocab: 5\n"
        "precision: {io_dtype: float64}\ntargets: {onnx_genai: {layout: flat}, onnx_genai: {}}\n"
    )
    err = failure(write(tmp_path, text))
    assert err.exit_code is ExitCode.FINDINGS
    positions = [(d.span.line, d.span.col) for d in err.diagnostics]
    assert positions == [(5, 11), (6, 5), (7, 23), (8, 39)]
    assert [d.message.split(" ")[0] for d in err.diagnostics] == [
        "source.synthetic.seed",
        "unknown",
        "precision.io_dtype",
        "duplicate",
    ]


def test_unknown_key_without_a_close_match_lists_the_keys(tmp_path):
    err = failure(write(tmp_path, MINIMAL + "precision: {zzz: 1}\n"))
    (diag,) = err.diagnostics
    assert diag.hint == "expected one of: io_dtype"


def test_render_carries_the_source_line_and_caret(tmp_path):
    err = failure(write(tmp_path, MINIMAL + "mtp: {head: maybe}\n"))
    rendered = err.diagnostics[0].render()
    assert rendered.splitlines()[1:3] == ["   6 | mtp: {head: maybe}", "                   ^^^^^"]


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"", "the spec must be a mapping, not null"),
        (b"- a\n- b\n", "the spec must be a mapping, not a list"),
    ],
)
def test_yaml_that_is_not_a_spec_is_a_finding(tmp_path, content, fragment):
    path = tmp_path / "spec.yaml"
    path.write_bytes(content)
    err = failure(path)
    assert err.exit_code is ExitCode.FINDINGS
    assert fragment in str(err)


def test_missing_file_is_a_usage_error(tmp_path):
    err = failure(tmp_path / "nope.yaml")
    assert err.exit_code is ExitCode.USAGE
    assert "spec file not found" in str(err)


def test_folder_is_a_usage_error(tmp_path):
    assert failure(tmp_path).exit_code is ExitCode.USAGE


def test_binary_file_is_a_usage_error(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"mtpc: 1\n\xff\xfe\n")
    err = failure(path)
    assert err.exit_code is ExitCode.USAGE
    assert "not UTF-8" in str(err)


def test_two_documents_are_not_a_spec(tmp_path):
    err = failure(write(tmp_path, MINIMAL + "---\n" + MINIMAL))
    assert err.exit_code is ExitCode.USAGE
    assert err.diagnostics[0].span.line == 6


def test_recursive_alias_is_reported(tmp_path):
    err = failure(write(tmp_path, MINIMAL + "x: &loop [*loop]\n"))
    assert "an alias refers to the collection it is in" in str(err)


# ----------------------------------------------------------------------------- the schema itself


def _objects(schema, where=""):
    yield where, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _objects(sub, f"{where}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _objects(schema["items"], f"{where}[]")


def test_every_object_is_closed_and_every_field_described():
    for where, sub in _objects(load_schema("spec")):
        assert sub.get("description"), f"{where or 'root'} has no description"
        if sub.get("type") == "object" or "properties" in sub:
            assert sub.get("additionalProperties") is False, f"{where or 'root'} is open"


def test_schema_defaults_satisfy_their_own_schemas():
    import jsonschema

    for where, sub in _objects(load_schema("spec")):
        if "default" in sub:
            jsonschema.Draft202012Validator(sub).validate(sub["default"])


def test_docs_mention_every_field():
    docs = (REPO / "docs" / "spec.md").read_text(encoding="utf-8")
    mentioned = set(re.findall(r"`([a-z_0-9]+)`", docs))
    for where, _ in _objects(load_schema("spec")):
        name = where.rsplit(".", 1)[-1].rstrip("[]")
        if name:
            assert name in mentioned, f"docs/spec.md does not mention `{name}` ({where})"


def test_schema_is_the_shipped_file():
    shipped = json.loads((REPO / "schemas" / "spec.schema.json").read_text(encoding="utf-8"))
    assert shipped == load_schema("spec")


@pytest.mark.parametrize(
    "body, meant",
    [
        ("targets: {onnxruntime_genai: {execution_provider: gpu}}\n", "cuda"),  # spelling alone says 'cpu'
        ("mtp: {head: yes}\n", "on"),
        ("mtp: {head: true}\n", "on"),
        ("mtp: {head: No}\n", "off"),
        ("mtp: {head: false}\n", "off"),
        ("mtp: {head: aut}\n", "auto"),
    ],
)
def test_enum_hints_know_common_aliases(tmp_path, body, meant):
    (diag,) = failure(write(tmp_path, MINIMAL + body)).diagnostics
    assert diag.hint == f"did you mean '{meant}'?"


def test_an_empty_spec_is_told_what_a_minimal_spec_is(tmp_path):
    (diag,) = failure(write(tmp_path, "")).diagnostics
    assert diag.message == "the spec must be a mapping, not null"
    assert "`mtpc: 1`, `name: my-model` and `source: {synthetic: {}}`" in diag.hint
    minimal = "mtpc: 1\nname: my-model\nsource: {synthetic: {}}\n"
    assert load_spec(write(tmp_path, minimal, "minimal.yaml")).data["name"] == "my-model"


def test_an_empty_mapping_names_each_missing_key_once(tmp_path):
    err = failure(write(tmp_path, "{}\n"))
    assert [d.message for d in err.diagnostics] == [
        "the spec is missing the required key 'mtpc'",
        "the spec is missing the required key 'name'",
        "the spec is missing the required key 'source'",
    ]


def test_cross_field_rules_run_beside_schema_errors_in_other_sections(tmp_path):
    body = "mtp: {head: maybe}\nquantization:\n  default: {bits: 4, block_size: 48}\n"
    err = failure(write(tmp_path, MINIMAL + body))
    assert [d.path for d in err.diagnostics] == ["mtp.head", "quantization.default.block_size"]
    # ... but not over a section that has a schema error of its own
    body = "quantization:\n  default: {bits: 3, block_size: 48}\n"
    (diag,) = failure(write(tmp_path, MINIMAL + body)).diagnostics
    assert diag.path == "quantization.default.bits"
