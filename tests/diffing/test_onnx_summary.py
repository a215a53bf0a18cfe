"""ONNX graphs summarized by meaning, on graphs built here with onnx.helper."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from mtpc.diffing.report import file_verdict
from mtpc.diffing.changes import diff_values, sorted_changes, to_plain
from mtpc.diffing.files import diff_files
from mtpc.ir.weights import QuantScheme
from mtpc.diffing.onnx_summary import summary_of


def graph(block_size=32, x_dtype=TensorProto.FLOAT, extra_node=False) -> bytes:
    weight = TensorProto(name="w_Q4", data_type=TensorProto.UINT8, dims=[8, 1, 16])
    weight.data_location = TensorProto.EXTERNAL
    # The data file does not exist: a summary that tried to read the weights would fail.
    for key, value in (("location", "no-such-file.data"), ("offset", "0"), ("length", "128")):
        weight.external_data.add(key=key, value=value)
    scales = helper.make_tensor("w_scales", TensorProto.FLOAT, [8, 1], [1.0] * 8)
    nodes = [helper.make_node("MatMulNBits", ["x", "w_Q4", "w_scales"], ["y"], name="/proj/MatMul", domain="com.microsoft",
                              K=32, N=8, bits=4, block_size=block_size)]
    if extra_node:
        nodes.append(helper.make_node("Relu", ["y"], ["z"], name="/act"))
    out = "z" if extra_node else "y"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_dtype, ["batch", 32])],
                          [helper.make_tensor_value_info(out, x_dtype, ["batch", 8])], [weight, scales])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def test_a_summary_never_reads_external_weight_data():
    s = summary_of(graph())
    assert s["inputs"] == [{"name": "x", "dtype": "float32", "shape": "[batch, 32]"}]
    assert s["ops"] == {"com.microsoft::MatMulNBits": 1}
    (w,) = [i for i in s["initializers"] if i["name"] == "w_Q4"]
    assert w == {"name": "w_Q4", "dtype": "uint8", "shape": "[8, 1, 16]", "encoding": "int4 MatMulNBits block 32: weight",
                 "stored": "external no-such-file.data"}


def changes(old: bytes, new: bytes):
    return sorted_changes(diff_files({"m.onnx": lambda: iter([old])}, {"m.onnx": lambda: iter([new])}))


def test_an_attribute_change_is_minor_and_names_the_node():
    found = changes(graph(32), graph(64))
    assert [c.render() for c in found] == [
        '~ m.onnx:/initializers[name=w_Q4]/encoding: "int4 MatMulNBits block 32: weight" -> "int4 MatMulNBits block 64: weight"',
        '~ m.onnx:/initializers[name=w_scales]/encoding: "int4 MatMulNBits block 32: scales" -> "int4 MatMulNBits block 64: scales"',
        "~ m.onnx:/nodes[name=/proj/MatMul]/attributes/block_size: 32 -> 64",
    ]
    assert file_verdict("m.onnx", found).severity == "minor"


def test_a_node_added_is_moderate_an_interface_change_major():
    added = changes(graph(), graph(extra_node=True))
    assert "+ m.onnx:/ops/Relu = 1" in [c.render() for c in added]
    assert file_verdict("m.onnx", added).severity == "major"  # the output is now z: the interface changed too
    retyped = changes(graph(), graph(x_dtype=TensorProto.FLOAT16))
    assert '~ m.onnx:/inputs[name=x]/dtype: "float32" -> "float16"' in [c.render() for c in retyped]
    assert file_verdict("m.onnx", retyped).reason == "interface changed: inputs ~1, outputs ~1"
    # nodes only: same interface
    node_only = [c for c in added if c.path[0] in ("nodes", "ops")]
    assert file_verdict("m.onnx", node_only).severity == "moderate"


def test_an_unparseable_graph_falls_back_to_its_hash():
    (only,) = changes(b"not a graph", b"not one either")
    assert only.path == () and str(only.old).startswith("sha256:")


def test_a_float_scheme_has_no_block_size_to_diff():
    """Raising the default block_size must not show on an override that keeps its weight float."""
    assert diff_values(to_plain(QuantScheme(bits=None, block_size=32)), to_plain(QuantScheme(bits=None, block_size=64))) == []
    assert len(diff_values(to_plain(QuantScheme(bits=4, block_size=32)), to_plain(QuantScheme(bits=4, block_size=64)))) == 1
    assert "block_size" in to_plain(QuantScheme(bits=None, keep_source=True))
