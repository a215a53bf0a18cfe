"""onnx-genai borrows the LM head as one MatMulNBits: a kept form that needs more is refused at the spec."""

from __future__ import annotations

import pytest
from gguf import GGMLQuantizationType as QT

from mtpc.util.diagnostics import MtpcError
from mtpc.pipeline.driver import build_ir
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf

TARGETS = "targets:\n  onnx_genai: {layout: flat}\n"


@pytest.mark.parametrize("qtype, kind", [(QT.Q5_1, "a per-block offset"), (QT.Q4_1, "float zero points")])
def test_a_kept_lm_head_whose_form_needs_more_is_refused(tmp_path, qtype, kind):
    write_gguf(tmp_path / "m.gguf", tiny_arch(), seed=3, types=(("output.weight", qtype),), tokenizer=True)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"mtpc: 1\nname: t\nsource: {{gguf: m.gguf}}\nquantization:\n  default: {{keep: source}}\n{TARGETS}")
    with pytest.raises(MtpcError) as err:
        build_ir(spec)
    (diag,) = err.value.diagnostics
    assert diag.span is not None and diag.span.line == 5
    assert diag.message == (
        f"quantization.default keeps lm_head.weight as the source's {qtype.name}, whose exact form needs {kind}, "
        "which the onnx_genai target's MTP sidecar cannot apply when it borrows the LM head"
    )


def test_the_hint_builds(tmp_path):
    write_gguf(tmp_path / "m.gguf", tiny_arch(), seed=3, types=(("output.weight", QT.Q5_1),), tokenizer=True)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "mtpc: 1\nname: t\nsource: {gguf: m.gguf}\nquantization:\n  default: {keep: source}\n"
        f"  overrides: [{{match: lm_head.weight, bits: null}}]\n{TARGETS}"
    )
    ir, _ = build_ir(spec)
    assert next(w for w in ir.weights if w.name == "lm_head.weight").form is None
