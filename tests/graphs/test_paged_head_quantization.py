"""A paged target whose head is quantized differently from the main model.

onnxruntime-genai 0.18.0's own builder loses the paged options when the head
has its own quantization and silently emits a dense head, which its Engine then
rejects. Ours must stay paged, with its own bit width.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from mtpc.checks import check_package
from mtpc.pipeline.driver import build
from mtpc.output.write import write_package

SPEC = """\
mtpc: 1
name: paged-int4-main-int8-head
source:
  synthetic: {seed: 3}
mtp: {head: on}
precision: {io_dtype: float16}
quantization:
  default: {bits: 4, block_size: 32}
  overrides:
    - {match: "mtp.*", bits: 8, block_size: 32}
targets:
  onnxruntime_genai:
    execution_provider: cuda
    attention: paged
    paged: {block_size: 16, num_blocks: 32}
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("paged-quant")
    spec = root / "spec.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    write_package(build(spec).artifacts, root / "pkg")
    return root / "pkg"


def _graph(path: Path) -> onnx.GraphProto:
    return onnx.load(str(path), load_external_data=False).graph


def _bits(graph: onnx.GraphProto) -> dict[str, int]:
    """Bit width of each MatMulNBits node, by the weight it reads."""
    return {
        node.input[1]: attr.i
        for node in graph.node
        if node.op_type == "MatMulNBits"
        for attr in node.attribute
        if attr.name == "bits"
    }


def _shape(value_info) -> list:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def test_head_keeps_the_paged_contract(package):
    head = _graph(package / "mtp" / "mtp.onnx")
    inputs = {v.name: v for v in head.input}
    assert "attention_mask" not in inputs
    for name in ("block_table", "cumulative_sequence_lengths", "past_sequence_lengths", "attention_metadata"):
        assert name in inputs, name
    assert _shape(inputs["hidden_states"]) == ["num_tokens", 64]
    assert _shape(inputs["past_key_values.0.key"])[2:] == [2, 64]  # [num_blocks, block_size, kv heads, head dim]
    assert any(n.op_type == "PagedAttention" for n in head.node)
    assert not any(n.op_type == "GroupQueryAttention" for n in head.node)


def test_head_and_main_have_their_own_bit_widths(package):
    assert set(_bits(_graph(package / "model.onnx")).values()) == {4}
    head = _bits(_graph(package / "mtp" / "mtp.onnx"))
    own = {name: bits for name, bits in head.items() if name.startswith("mtp.")}
    assert len(own) == 5 and set(own.values()) == {8}  # fc, packed q/k/v, o, packed gate/up, down
    # The LM head is the main model's, shared: it follows the main model's quantization.
    assert head["lm_head.MatMul.weight"] == 4  # packed under its own name, for onnx-genai to borrow


def test_main_hidden_output_and_head_hidden_input_match(package):
    main = {v.name: v for v in _graph(package / "model.onnx").output}["hidden_states"]
    head = {v.name: v for v in _graph(package / "mtp" / "mtp.onnx").input}["hidden_states"]
    assert _shape(main) == _shape(head) == ["num_tokens", 64]
    assert main.type.tensor_type.elem_type == head.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_package_passes_the_contract_checks(package):
    assert [f.render() for f in check_package(package)] == []


def test_head_passes_the_full_onnx_check(package):
    onnx.checker.check_model(str(package / "mtp" / "mtp.onnx"), full_check=True)
