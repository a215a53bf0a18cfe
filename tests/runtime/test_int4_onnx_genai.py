"""An int4 package with both targets and an int4 LM head: accepted by our checks and upstream's schemas,
and its onnx-genai sidecar head runs in onnxruntime against the numpy reference (`mtpc verify`).

onnx-genai's sidecar borrows the main model's LM head by name; a MatMulNBits head is borrowable when
its companions follow upstream's naming (`lm_head.MatMul.scales` beside `lm_head.MatMul.weight`), so
no float copy of the LM head is needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import onnx
import pytest

from mtpc.cli.main import main
from mtpc.schema.validation import read_yaml
from tests.fixtures.ort_release import for_installed_release
from tests.fixtures.shared import shared_file

TINY = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml"


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("int4-onnx-genai")
    text = for_installed_release(TINY.read_text("utf-8"))
    assert "  default: {bits: null}\n" in text and "  onnx_genai:\n    layout: flat" in text
    # accuracy_level 0: float activations, so verify holds the package to its tight bound.
    spec = folder / "int4.yaml"
    spec.write_text(text.replace("  default: {bits: null}\n", "  default: {bits: 4, block_size: 32, accuracy_level: 0}\n"))
    out = folder / "pkg"
    assert main(["compile", "-q", str(spec), "-o", str(out)]) == 0
    return out, spec


def _upstream(name: str) -> dict:
    return json.loads(shared_file(f"conformance/onnx-genai/{name}").read_text(encoding="utf-8"))


def test_the_lm_head_is_int4_and_borrowed_by_name(package):
    out, _ = package
    block = json.loads((out / "config.json").read_text())["speculator_config"]
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    initializers = {i.name: i for i in graph.initializer}
    lm_head = initializers[block["lm_head"]["name"]]
    assert lm_head.data_type == onnx.TensorProto.UINT8 and len(lm_head.dims) == 3  # packed, not float
    assert block["lm_head"]["name"].rsplit(".", 1)[0] + ".scales" in initializers


def test_check_and_the_upstream_schemas_accept_it(package, capsys):
    out, _ = package
    assert main(["check", str(out)]) == 0, capsys.readouterr().out
    jsonschema.validate(read_yaml((out / "inference_metadata.yaml").read_text()), _upstream("workflow-layout.schema.json"))
    flat = _upstream("flat-layout.schema.json")
    speculator = {"$schema": flat["$schema"], "$ref": "#/$defs/SpeculatorConfig", "$defs": flat["$defs"]}
    jsonschema.validate(json.loads((out / "config.json").read_text())["speculator_config"], speculator)


def test_the_sidecar_head_matches_the_reference(package, capsys):
    out, spec = package
    code = main(["verify", "-q", str(out), "--spec", str(spec), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"], report["checks"]
    sidecar = next(c for c in report["checks"] if c["check"] == "onnx-genai head hidden state")
    assert sidecar["ok"] and sidecar["max_abs_diff"] <= sidecar["bound"]
