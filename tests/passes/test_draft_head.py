"""The head's own LM head through the pipeline: its weight decided by its own rule, the plan line's rows and
bytes against the package written, the ranking of a counts file, and the counts file in provenance."""

from __future__ import annotations

import json

import onnx
import pytest

from mtpc.emit.provenance_record import compare
from mtpc.output.write import write_package
from mtpc.pipeline.driver import build, build_ir

CPU = "targets:\n  onnxruntime_genai: {execution_provider: cpu}\n"


def _spec(tmp_path, mtp: str, quantization: str = "") -> object:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"mtpc: 1\nname: d\nsource: {{synthetic: {{seed: 0}}}}\nmtp:\n{mtp}{quantization}{CPU}")
    return spec


def _initializer_bytes(path) -> dict[str, int]:
    model = onnx.load(path, load_external_data=False)
    return {t.name: int({e.key: e.value for e in t.external_data}.get("length", 0)) or len(t.raw_data)
            for t in model.graph.initializer}


def test_the_head_copy_has_its_own_rule_and_the_plan_says_its_rows_and_bytes(tmp_path):
    spec = _spec(tmp_path, "  draft_vocabulary: {size: 100}\n",
                 "quantization:\n  overrides:\n    - {match: mtp.lm_head.weight, bits: 8, block_size: 32}\n")
    with build(spec) as built:
        weights = {w.name: w for w in built.ir.weights}
        own, main = weights["mtp.lm_head.weight"], weights["lm_head.weight"]
        assert (own.form.bits, own.form.block_size, own.rule.split(",")[0]) == (8, 32, "override 1 (mtp.lm_head.weight)")
        assert main.form is None and main.rule == "default"
        (line,) = [line for name, result in built.pass_results for line in result.changes if line.startswith("mtp.lm_head")]
        write_package(built.artifacts, tmp_path / "pkg")
    head = _initializer_bytes(tmp_path / "pkg" / "mtp" / "mtp.onnx")
    stored = sum(n for name, n in head.items() if name.startswith("mtp.lm_head.MatMul."))
    # 100 rows x 64 in int8 blocks of 32: codes plus a float32 scale per block.
    assert stored == 100 * 64 + 100 * 2 * 4
    assert f"100 of 256 rows" in line and f"{stored / 2**20:.2f} MiB" in line and "float32, 0.06 MiB" in line
    card = (tmp_path / "pkg" / "README.md").read_text()
    assert "its own LM head scores 100 of the 256 tokens" in card
    report = json.loads((tmp_path / "pkg" / "quantization.json").read_text())
    entry = next(w for w in report["weights"] if w["name"] == "mtp.lm_head.weight")
    assert entry["stored"]["kind"] == "MatMulNBits" and entry["stored"]["bits"] == 8


def test_without_an_option_there_is_no_copy(tmp_path):
    ir, _ = build_ir(_spec(tmp_path, "  head: auto\n"))
    assert "mtp.lm_head.weight" not in {w.name for w in ir.weights}
    assert not ir.mtp.own_lm_head and ir.mtp.draft_vocabulary is None


def test_an_own_copy_of_every_row_follows_the_default(tmp_path):
    ir, _ = build_ir(_spec(tmp_path, "  lm_head: own\n", "quantization:\n  default: {bits: 4}\n"))
    own = next(w for w in ir.weights if w.name == "mtp.lm_head.weight")
    assert own.form.bits == 4 and ir.mtp.draft_vocabulary is None
    assert next(t for t in ir.source_tensors if t.name == "mtp.lm_head.weight").shape == (256, 64)


def test_counts_rank_the_draft_vocabulary_and_provenance_records_the_file(tmp_path):
    counts = {str(t): 1000 - t for t in range(200, 256)}  # the 56 highest ids, most frequent first
    (tmp_path / "counts.json").write_text(json.dumps(counts))
    spec = _spec(tmp_path, "  draft_vocabulary: {size: 60, counts: counts.json}\n")
    ir, _ = build_ir(spec)
    # The 56 counted tokens, then the tokenizer-less order's first: the specials 1, 2, 0, then 3.
    assert ir.mtp.draft_vocabulary.ids == (0, 1, 2, 3, *range(200, 256))
    with build(spec) as built:
        provenance = json.loads(next(a for a in built.artifacts if a.relpath == "provenance.json").read())
    assert provenance["draft_counts"]["file"] == "counts.json"
    assert len(provenance["draft_counts"]["sha256"]) == 64
    assert compare(provenance, ir, spec) == []
    (tmp_path / "counts.json").write_text(json.dumps({**counts, "5": 1}))
    changed, _ = build_ir(spec)
    (mismatch,) = compare(provenance, changed, spec)
    assert "counts file differs" in mismatch.message


def _matmul_names(model_path) -> set[str]:
    """The quantized weights a graph multiplies: its MatMulNBits nodes' weight inputs."""
    model = onnx.load(model_path, load_external_data=False)
    return {node.input[1] for node in model.graph.node if node.op_type == "MatMulNBits"}


@pytest.mark.parametrize("default, head_bits, main_bits", [("{bits: null}", 8, None), ("{bits: 4}", "null", 4)])
def test_an_override_on_mtp_quantizes_the_draft_side_apart_from_the_main_model(tmp_path, default, head_bits, main_bits):
    """Draft-side precision is `quantization.overrides` on `mtp.*` (docs/spec.md): a float main model with an int8
    head and int8 draft LM head, or an int4 main model drafting with a float head. The plan's override line counts
    exactly the head's matmuls, quantization.json and the graphs store them so, and nothing of the main model moves."""
    spec = _spec(tmp_path, "  lm_head: own\n",
                 f"quantization:\n  default: {default}\n  overrides:\n    - {{match: 'mtp.*', bits: {head_bits}}}\n")
    with build(spec) as built:
        linear = [w for w in built.ir.weights if w.role.value == "linear"]
        head = {w.name: w for w in linear if w.name.startswith("mtp.")}
        main = {w.name: w for w in linear if not w.name.startswith("mtp.")}
        assert "mtp.lm_head.weight" in head and "lm_head.weight" in main and "mtp.fc.weight" in head
        want_head = None if head_bits == "null" else head_bits
        assert {w.form.bits if w.form else None for w in head.values()} == {want_head}
        assert {w.form.bits if w.form else None for w in main.values()} == {main_bits}
        assert all(w.rule.startswith("override 1 (mtp.*)") for w in head.values())
        changes = [line for name, result in built.pass_results if name == "quantization" for line in result.changes]
        (line,) = [c for c in changes if c.startswith("override 1 (mtp.*)") and " linear " in c]
        assert f": {len(head)} linear float32 -> " in line
        assert (f"int{head_bits} MatMulNBits" in line) if want_head else "-> float32 (lossless)" in line
        write_package(built.artifacts, tmp_path / "pkg")
    report = {w["name"]: w for w in json.loads((tmp_path / "pkg" / "quantization.json").read_text())["weights"]}
    for name in head:
        assert (report[name]["stored"]["kind"] == "MatMulNBits") == bool(want_head), report[name]
    quantized_in = lambda path: {n.split(".MatMul.")[0] for n in _matmul_names(path)}  # noqa: E731
    head_graph, main_graph = quantized_in(tmp_path / "pkg" / "mtp" / "mtp.onnx"), quantized_in(tmp_path / "pkg" / "model.onnx")
    assert bool(head_graph) == bool(want_head) and bool(main_graph) == bool(main_bits)
    assert all(n.startswith("mtp.") for n in head_graph) and ("mtp.lm_head" in head_graph) == bool(want_head), head_graph
