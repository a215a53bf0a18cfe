"""Golden packages: what each shipped spec emits, kept in tests/golden/<spec name>/.

A change to an emitted artifact must show up here as a diff a reviewer can read.
Text artifacts are stored as they are; each ONNX graph is stored as a summary
that onnx itself reads off the emitted bytes (I/O, op counts, initializers).

The goldens are not trusted because mtpc wrote them: the second half of this
file checks them with the real consumers (onnxruntime-genai 0.18.0's parser,
onnx-genai's own metadata crate and MTP validators through ong-check, and the
upstream onnx-genai schemas).

To accept an intended change: MTPC_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
from pathlib import Path

import jsonschema
import onnx
import onnxruntime_genai as og
import pytest
import yaml

from mtpc.pipeline.driver import build
from tests.clients import onnx_genai
from tests.fixtures.shared import shared_file
from tests.fixtures.onnx_nodes import every_node

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
SPECS = sorted((REPO / "specs").glob("*.yaml"))
UPDATE = os.environ.get("MTPC_UPDATE_GOLDEN") == "1"

TEXT_SUFFIXES = (".json", ".yaml", ".md")


def _dims(value_info) -> list:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


# Ops whose attributes carry the model's semantics (head counts, scales, activations, quantization),
# listed per op type in the summary; for MatMulNBits only the encoding (K and N vary per node).
SUMMARIZED_ATTRIBUTES = {
    "GroupQueryAttention": None, "PagedAttention": None, "LinearAttention": None, "GatedDeltaNet": None,
    "CausalConvWithState": None, "VarlenCausalConvWithState": None, "MatMulNBits": ("bits", "block_size"),
}


def _attribute_text(value) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


def _attribute_lines(nodes) -> list[str]:
    """One line per distinct attribute set of each summarized op type, with its node count."""
    sets = collections.Counter()
    for n in nodes:
        if n.op_type not in SUMMARIZED_ATTRIBUTES:
            continue
        names = SUMMARIZED_ATTRIBUTES[n.op_type]
        attrs = sorted((a.name, _attribute_text(onnx.helper.get_attribute_value(a)))
                       for a in n.attribute if names is None or a.name in names)
        sets[(f"{n.domain or 'ai.onnx'}::{n.op_type}", " ".join(f"{k}={v}" for k, v in attrs))] += 1
    return [f"  {op}: {attrs} (x{count})" for (op, attrs), count in sorted(sets.items())]


def graph_summary(onnx_bytes: bytes) -> str:
    model = onnx.load_from_string(onnx_bytes)
    g = model.graph
    nodes = list(every_node(g))
    dtype = onnx.helper.tensor_dtype_to_np_dtype
    lines = [f"opsets: {sorted((o.domain or 'ai.onnx', o.version) for o in model.opset_import)}", "inputs:"]
    for v in g.input:
        lines.append(f"  {v.name}: {dtype(v.type.tensor_type.elem_type)} {_dims(v)}")
    lines.append("outputs:")
    for v in g.output:
        lines.append(f"  {v.name}: {dtype(v.type.tensor_type.elem_type)} {_dims(v)}")
    ops = collections.Counter(f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in nodes)
    lines.append("ops:")
    lines += [f"  {op}: {count}" for op, count in sorted(ops.items())]
    lines.append("attributes:")
    lines += _attribute_lines(nodes)
    lines.append("initializers:")
    for t in sorted(g.initializer, key=lambda t: t.name):
        location = {e.key: e.value for e in t.external_data}.get("location")
        # Where the bytes live when not beside the graph (one copy of the weights main model and head share).
        elsewhere = f" @ {location}" if location and "/" in location else ""
        lines.append(f"  {t.name}: {dtype(t.data_type)} {list(t.dims)}{elsewhere}")
    return "\n".join(lines) + "\n"


def golden_files(spec: Path) -> dict[str, bytes]:
    result = build(spec)
    files: dict[str, bytes] = {}
    for art in result.artifacts:
        if art.relpath.endswith(TEXT_SUFFIXES):
            files[art.relpath] = art.read()
        elif art.relpath.endswith(".onnx"):
            files[art.relpath + ".summary.txt"] = graph_summary(art.read()).encode()
    return files


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_emitted_artifacts_match_golden(spec: Path):
    files = golden_files(spec)
    folder = GOLDEN / spec.stem
    if UPDATE:
        shutil.rmtree(folder, ignore_errors=True)
        for rel, data in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert on_disk == set(files), "golden file set differs; rerun with MTPC_UPDATE_GOLDEN=1 and review the diff"
    for rel, data in files.items():
        assert (folder / rel).read_bytes() == data, f"{spec.stem}/{rel} differs from its golden copy"


def test_every_spec_has_a_golden_folder():
    assert {p.name for p in GOLDEN.iterdir() if p.is_dir()} == {s.stem for s in SPECS}


# ---- the goldens, checked by the real consumers ---------------------------------------------


def _golden_dirs_with(relpath: str) -> list[Path]:
    return sorted(d for d in GOLDEN.iterdir() if (d / relpath).is_file())


@pytest.mark.parametrize("folder", _golden_dirs_with("genai_config.json"), ids=lambda p: p.name)
def test_golden_genai_configs_parse_in_onnxruntime_genai(folder: Path):
    og.Config(str(folder))
    if (folder / "mtp" / "genai_config.json").is_file():
        og.Config(str(folder / "mtp"))


@pytest.mark.parametrize("folder", _golden_dirs_with("inference_metadata.yaml"), ids=lambda p: p.name)
def test_golden_inference_metadata_satisfies_upstream_schema(folder: Path):
    document = yaml.safe_load((folder / "inference_metadata.yaml").read_text(encoding="utf-8"))
    # The schema onnx-genai generates from its own types at the commit the packages are checked against
    # (its file is named for the workflow layout that commit introduced; a package without a pipeline is
    # valid against it too). A second, cheaper check: the crate itself runs below.
    schema = json.loads(shared_file("conformance/onnx-genai/workflow-layout.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(document)


@pytest.mark.parametrize("folder", _golden_dirs_with("inference_metadata.yaml"), ids=lambda p: p.name)
def test_golden_spec_compiles_to_a_package_onnx_genai_loads_with_its_head(folder: Path, tmp_path):
    """onnx-genai's own parser and MTP validators (ong-check) on the spec's package, freshly compiled: its text
    files are the goldens (the test above), its graphs the ones summarized there."""
    from mtpc.output.write import write_package

    onnx_genai.require()
    spec = REPO / "specs" / f"{folder.name}.yaml"
    write_package(build(spec).artifacts, tmp_path / folder.name)
    report = onnx_genai.assert_loads(tmp_path / folder.name)
    has_head = (folder / "config.json").is_file()
    assert report["speculative"]["status"] == ("mtp" if has_head else "absent")
    if has_head:
        resolved = report["speculative"]["resolved"]
        assert resolved["embedding_initializer"] == "model.embed_tokens.weight"
        assert resolved["target_hidden_layout"] == "Bsh" and resolved["hc_mult"] == 1


@pytest.mark.parametrize("folder", _golden_dirs_with("config.json"), ids=lambda p: p.name)
def test_golden_speculator_config_satisfies_upstream_definition(folder: Path):
    # The only upstream definition of SpeculatorConfig is in the flat layout's schema (its `speculative`).
    flat = json.loads(shared_file("conformance/onnx-genai/flat-layout.schema.json").read_text(encoding="utf-8"))
    speculator_schema = {"$schema": flat["$schema"], "$ref": "#/$defs/SpeculatorConfig", "$defs": flat["$defs"]}
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert list(config) == ["speculator_config"]
    jsonschema.Draft202012Validator(speculator_schema).validate(config["speculator_config"])


def test_golden_with_head_declares_it_everywhere():
    folder = GOLDEN / "qwen35-tiny-mtp"
    config = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))
    assert config["model"]["mtp"]["filename"] == "mtp/mtp.onnx"
    summary = (folder / "model.onnx.summary.txt").read_text(encoding="utf-8")
    assert "  hidden_states: float32 ['batch_size', 'sequence_length', 64]" in summary
    speculator = json.loads((folder / "config.json").read_text(encoding="utf-8"))["speculator_config"]
    assert speculator["model"] == "mtp_sidecar/mtp_sidecar.onnx"


def test_golden_without_head_has_no_trace_of_mtp():
    folder = GOLDEN / "qwen35-tiny-nohead"
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert not any("mtp" in n for n in names)
    for name in names:
        text = (folder / name).read_text(encoding="utf-8").lower()
        if name == "provenance.json":  # the spec is recorded as written, comments and all; the rest is ours
            doc = json.loads(text)
            doc.pop("spec")
            text = json.dumps(doc)
        # "mtpc" (the tool's own name) may appear; "mtp" as a word or name part may not.
        assert not re.search(r"mtp(?!c)", text), name
        assert "hidden_states" not in text and "specul" not in text, name
