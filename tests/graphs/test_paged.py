"""Paged (packed-token) graphs: PagedAttention has only CUDA kernels, so on CPU they are checked
structurally (onnx.checker full check with shape inference) and run on a GPU by tests/gpu/run_paged_check.py."""

import onnx
import pytest

from mtpc.diagnostics import MtpcError
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.arch import tiny_arch

from .tiny import ONNX_GENAI_HEAD_FILE, ORT_HEAD_FILE, contract_io, emit, graph_io, make_ir


@pytest.fixture(scope="module")
def arch():
    return tiny_arch()


@pytest.fixture(scope="module")
def package(arch, tmp_path_factory):
    out = tmp_path_factory.mktemp("paged") / "pkg"
    ir = make_ir(arch, io_dtype="float16", paged=True)
    emit(ir, seeded_store(arch, 0), out)
    return ir, out


@pytest.mark.parametrize("filename", ["model.onnx", ORT_HEAD_FILE])
def test_paged_graphs_pass_the_full_onnx_check(package, filename):
    _, out = package
    onnx.checker.check_model(str(out / filename), full_check=True)


@pytest.mark.parametrize("filename, contract", [("model.onnx", "main"), (ORT_HEAD_FILE, "head")])
def test_paged_graph_io_is_the_packed_contract(package, filename, contract):
    ir, out = package
    expected = ir.main.contract if contract == "main" else ir.heads[0][1].contract
    model = onnx.load(out / filename, load_external_data=False)
    assert graph_io(model.graph.input) == contract_io(expected.inputs)
    assert graph_io(model.graph.output) == contract_io(expected.outputs)
    assert "attention_mask" not in {i.name for i in model.graph.input}


def test_paged_main_uses_the_packed_kernels(package):
    _, out = package
    ops = [n.op_type for n in onnx.load(out / "model.onnx", load_external_data=False).graph.node]
    assert ops.count("PagedAttention") == 2  # layers 1 and 3
    assert ops.count("GatedDeltaNet") == 2 and ops.count("VarlenCausalConvWithState") == 2
    assert "GroupQueryAttention" not in ops and "LinearAttention" not in ops
    head_ops = [n.op_type for n in onnx.load(out / ORT_HEAD_FILE, load_external_data=False).graph.node]
    assert head_ops.count("PagedAttention") == 1


def test_onnx_genai_head_stays_dense_next_to_a_paged_target(package):
    _, out = package
    ops = {n.op_type for n in onnx.load(out / ONNX_GENAI_HEAD_FILE, load_external_data=False).graph.node}
    assert "GroupQueryAttention" in ops and "PagedAttention" not in ops


def test_paged_float32_is_refused(arch):
    with pytest.raises(MtpcError, match="float16 or bfloat16"):
        emit(make_ir(arch, io_dtype="float32", paged=True), seeded_store(arch, 0))

