"""quantization.json: every weight's stored form and the rule that chose it, checked by its schema and `mtpc check`."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from mtpc.checks import check_package
from mtpc.cli.main import main
from mtpc.emit.quantization_report import emit_quantization_report
from mtpc.ir import QuantForm, QuantizationPlan, QuantOverride, QuantScheme
from mtpc.passes import default_pipeline
from mtpc.schema.validation import errors as schema_errors, json_path
from tests.passes.ir_factory import compiled, make_ir
from tests.fixtures.package_files import remanifest

REPO = Path(__file__).resolve().parents[2]

INT4_FLOAT_LM_HEAD = QuantizationPlan(
    default=QuantScheme(bits=4, block_size=32),
    overrides=(QuantOverride("lm_head.weight", QuantScheme(bits=None)),),
)


def report(ir) -> tuple[dict, bytes]:
    (artifact,) = emit_quantization_report(ir, None)
    assert artifact.relpath == "quantization.json" and artifact.schema == "quantization"
    data = artifact.read()
    return json.loads(data), data


def quantized_ir(plan: QuantizationPlan = INT4_FLOAT_LM_HEAD, **kw):
    return default_pipeline().run(replace(make_ir(**kw), quantization=plan))


def test_float_package_lists_every_weight_as_float_and_lossless():
    ir = compiled()
    doc, _ = report(ir)
    assert doc["format_version"] == 1 and doc["io_dtype"] == "float32"
    assert [w["name"] for w in doc["weights"]] == sorted(w.name for w in ir.weights)
    assert all(w["stored"] == {"kind": "float", "dtype": "float32"} and w["lossless"] and w["rule"] == "default"
               for w in doc["weights"])
    by_role = {s["role"]: s for s in doc["summary"]}
    assert set(by_role) == {"embedding", "linear", "tensor"}
    assert sum(s["count"] for s in doc["summary"]) == len(ir.weights)
    assert by_role["linear"] == {"rule": "default", "role": "linear", "source": "float32", "result": "float32",
                                 "lossless": True, "count": sum(1 for w in ir.weights if w.role.value == "linear")}
    assert schema_errors("quantization", doc) == []


def test_int4_default_with_a_float_lm_head_override():
    doc, _ = report(quantized_ir())
    weights = {w["name"]: w for w in doc["weights"]}
    assert weights["layers.0.mlp.up_proj.weight"] == {
        "name": "layers.0.mlp.up_proj.weight", "role": "linear", "source": "float32",
        "rule": "default, accuracy_level from the cpu profile", "lossless": False,
        "stored": {"kind": "MatMulNBits", "bits": 4, "block_size": 32, "has_zero_points": False,
                   "float_zero_points": False, "block_offsets": False, "accuracy_level": 4},  # cpu profile's level
    }
    assert weights["lm_head.weight"]["stored"] == {"kind": "float", "dtype": "float32"}
    assert weights["lm_head.weight"]["rule"] == "override 1 (lm_head.weight)" and weights["lm_head.weight"]["lossless"]
    # The default's bits leave the float embedding float.
    assert weights["embed_tokens.weight"]["stored"]["kind"] == "float"
    groups = {(s["rule"], s["role"]): s for s in doc["summary"]}
    assert groups[("override 1 (lm_head.weight)", "linear")]["count"] == 1
    assert groups[("default, accuracy_level from the cpu profile", "linear")]["result"] == "int4 MatMulNBits block 32 accuracy 4"
    assert schema_errors("quantization", doc) == []


def test_a_kept_block_encoding_names_its_op_and_every_form_field():
    ir = make_ir()
    carried = QuantForm(8, 32, False)
    tensors = tuple(
        replace(t, encoding="Q8_0", carried=carried) if len(t.shape) == 2 and t.shape[-1] % 32 == 0 else t
        for t in ir.source_tensors
    )
    plan = QuantizationPlan(default=QuantScheme(keep_source=True))
    doc, _ = report(default_pipeline().run(replace(ir, source_tensors=tensors, quantization=plan)))
    weights = {w["name"]: w for w in doc["weights"]}
    up = weights["layers.0.mlp.up_proj.weight"]
    assert up["source"] == "Q8_0" and up["lossless"] and up["rule"] == "default, keep: source, accuracy_level from the cpu profile"
    assert up["stored"]["kind"] == "MatMulNBits" and (up["stored"]["bits"], up["stored"]["block_size"]) == (8, 32)
    embedding = weights["embed_tokens.weight"]["stored"]
    assert embedding["kind"] == "GatherBlockQuantized" and "accuracy_level" not in embedding
    assert schema_errors("quantization", doc) == []


def test_the_report_is_deterministic_and_sorted():
    _, a = report(quantized_ir())
    _, b = report(quantized_ir())
    assert a == b and a.endswith(b"}\n")
    doc = json.loads(a)
    assert a.decode() == json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    names = [w["name"] for w in doc["weights"]]
    assert names == sorted(names)
    keys = [(s["rule"], s["role"], s["source"], s["result"], s["lossless"]) for s in doc["summary"]]
    assert keys == sorted(keys)


def test_a_form_field_the_ir_gains_is_written_and_allowed():
    # QuantForm serializes generically: a scalar field it gains reaches the report, and the schema takes it.
    doc, _ = report(quantized_ir())
    stored = next(w["stored"] for w in doc["weights"] if w["stored"]["kind"] == "MatMulNBits")
    extended = copy.deepcopy(doc)
    next(w for w in extended["weights"] if w["stored"] == stored)["stored"].update(zero_points="uint8", packing="rows")
    assert schema_errors("quantization", extended) == []


@pytest.mark.parametrize(
    "break_it, where",
    [
        (lambda d: d.pop("summary"), "/"),
        (lambda d: d["weights"][0].pop("stored"), "/weights/0"),
        (lambda d: d["weights"][0].update(role="bias"), "/weights/0/role"),
        (lambda d: d["summary"][0].update(count=0), "/summary/0/count"),
        (lambda d: d.update(extra=True), "/"),
        (lambda d: d["weights"][0].update(rule="somebody said so"), "/weights/0/rule"),
    ],
)
def test_schema_catches_a_broken_document(break_it, where):
    doc, _ = report(quantized_ir())
    break_it(doc)
    assert where in {json_path(e) for e in schema_errors("quantization", doc)}


def test_quantized_stored_form_needs_its_bits_and_matmul_its_accuracy_level():
    doc, _ = report(quantized_ir())
    entry = next(w for w in doc["weights"] if w["stored"]["kind"] == "MatMulNBits")
    del entry["stored"]["accuracy_level"]
    assert schema_errors("quantization", doc)
    entry["stored"].update(accuracy_level=4, bits=3)
    assert schema_errors("quantization", doc)


# ----------------------------------------------------------------------------- mtpc check


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("quant-report") / "pkg"
    assert main(["compile", "-q", str(REPO / "specs" / "qwen35-tiny-nohead.yaml"), "-o", str(out)]) == 0
    return out


def _copy(package: Path, tmp_path: Path) -> Path:
    shutil.copytree(package, tmp_path / "pkg")
    return tmp_path / "pkg"


def test_compiled_package_has_a_sound_report(package):
    assert (package / "quantization.json").is_file()
    assert check_package(package) == []


def test_check_reports_a_corrupted_report(package, tmp_path, capsys):
    pkg = _copy(package, tmp_path)
    doc = json.loads((pkg / "quantization.json").read_text(encoding="utf-8"))
    del doc["weights"][0]["lossless"]
    doc["summary"][0]["count"] += 1
    (pkg / "quantization.json").write_text(json.dumps(doc), encoding="utf-8")
    found = [f.render() for f in check_package(pkg)]
    assert "quantization.json:/weights/0: 'lossless' is a required property (schema quantization.schema.json)" in found
    assert any(f.startswith("quantization.json:/summary: counts ") for f in found), found
    assert main(["check", str(pkg)]) == 1
    assert "quantization.json" in capsys.readouterr().out


def test_check_reports_a_report_that_is_not_json(package, tmp_path):
    pkg = _copy(package, tmp_path)
    (pkg / "quantization.json").write_text("{not json", encoding="utf-8")
    (finding,) = check_package(remanifest(pkg))  # as written: here the report's own finding is what is checked
    assert finding.file == "quantization.json" and finding.message.startswith("cannot be parsed")


def test_a_weight_listed_twice_is_reported(package, tmp_path):
    pkg = _copy(package, tmp_path)
    doc = json.loads((pkg / "quantization.json").read_text(encoding="utf-8"))
    doc["weights"].append(doc["weights"][0])
    (pkg / "quantization.json").write_text(json.dumps(doc), encoding="utf-8")
    found = [f.render() for f in check_package(pkg)]
    assert f"quantization.json:/weights: weight {doc['weights'][0]['name']!r} is listed 2 times" in found


def test_a_package_without_a_report_is_not_a_finding(package, tmp_path):
    # Packages from before mtpc wrote quantization.json stay valid: the file is optional, validated when present.
    pkg = _copy(package, tmp_path)
    (pkg / "quantization.json").unlink()
    (pkg / "manifest.json").unlink()  # neither did they write manifest.json
    assert check_package(pkg) == []
