"""Paged (packed-token) graphs, structurally: onnx.checker full check with shape inference, the packed
contract, and each paged node configured like its dense counterpart. PagedAttention has only CUDA kernels;
tests/lowering computes these graphs on CPU through a test-only lowering, and tests/gpu/run_paged_check.py
runs them on a GPU."""

import onnx
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

from mtpc.sources.random_weights import seeded_store

from .tiny import ONNX_GENAI_HEAD_FILE, ORT_HEAD_FILE, contract_io, emit, graph_io, make_ir


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


def test_paged_float32_is_asserted_against(arch):
    # The spec rules refuse it as a user error; the builder never gets one.
    with pytest.raises(AssertionError, match="float16 or bfloat16"):
        emit(make_ir(arch, io_dtype="float32", paged=True), seeded_store(arch, 0))



# ---- the paged kernels against the dense graph of the same model ---------------------------
# PagedAttention cannot run on CPU, but the dense graph's GroupQueryAttention / LinearAttention /
# CausalConvWithState are checked numerically against the numpy reference (test_qwen35.py). Each
# paged node must therefore be configured like its dense counterpart: every attribute the two ops
# share, and every input bound by the op schema's own input names.

SCHEMAS = {s.name: s for s in get_all_operator_schema() if s.domain == "com.microsoft"}
# Only read with q_norm_weight / k_norm_weight, which neither node gets (asserted below).
NOT_COMPARED = {"qk_norm_epsilon"}
# Ops that only reshape or cast: they do not change which computation a value comes from.
LAYOUT_OPS = {"Reshape", "Cast", "Transpose"}


def effective_attributes(node) -> dict:
    """Attribute values as the kernel sees them: explicit, else the schema default, else 0 (what
    onnxruntime's kernels read for an absent attribute without a default)."""
    explicit = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    values = {}
    for name, spec in SCHEMAS[node.op_type].attributes.items():
        if name in explicit:
            values[name] = explicit[name]
        elif spec._default_value:
            default = onnx.AttributeProto()
            default.ParseFromString(spec._default_value)
            values[name] = onnx.helper.get_attribute_value(default)
        else:
            values[name] = 0
    return values


def bound_inputs(node) -> dict[str, str]:
    """Schema input name -> the value bound to it (empty string: omitted)."""
    names = [i.name for i in SCHEMAS[node.op_type].inputs]
    assert len(node.input) <= len(names), node.name
    return dict(zip(names, list(node.input) + [""] * (len(names) - len(node.input))))


def bound_outputs(node) -> dict[str, str]:
    return dict(zip([o.name for o in SCHEMAS[node.op_type].outputs], node.output))


class Graph:
    def __init__(self, path):
        self.graph = onnx.load(path, load_external_data=False).graph
        self.producer = {o: n for n in self.graph.node for o in n.output}
        self.inputs = {v.name for v in self.graph.input}
        self.initializers = {t.name for t in self.graph.initializer}

    def nodes(self, op_type) -> dict[str, onnx.NodeProto]:
        """Nodes of one op type keyed by the layer scope of their name (`/layers.1/self_attn`)."""
        return {n.name.rsplit("/", 1)[0].removesuffix("/conv"): n for n in self.graph.node if n.op_type == op_type}

    def origin(self, value: str) -> str:
        """The graph input, initializer or computing node a value comes from, past reshapes and casts."""
        while value in self.producer and self.producer[value].op_type in LAYOUT_OPS:
            value = self.producer[value].input[0]
        return self.producer[value].name if value in self.producer else value


@pytest.fixture(scope="module")
def dense_and_paged(arch, package, tmp_path_factory):
    _, paged_out = package
    dense_out = tmp_path_factory.mktemp("dense") / "pkg"
    emit(make_ir(arch, io_dtype="float16"), seeded_store(arch, 0), dense_out)
    return dense_out, paged_out


def _step(node_name: str) -> str:
    """`/layers.1/self_attn/q_rotary/Concat` -> `/layers.1/self_attn/q_rotary`."""
    return node_name.rsplit("/", 1)[0]


def _pairs(dense_and_paged, filename, dense_op, paged_op):
    dense_out, paged_out = dense_and_paged
    dense, paged = Graph(dense_out / filename), Graph(paged_out / filename)
    dense_nodes, paged_nodes = dense.nodes(dense_op), paged.nodes(paged_op)
    assert dense_nodes and set(paged_nodes) == set(dense_nodes)
    return [(dense, dense_nodes[k], paged, paged_nodes[k]) for k in sorted(dense_nodes)]


PAGED_CONTROL = {"cumulative_sequence_length": "cumulative_sequence_lengths",
                 "past_seqlens": "past_sequence_lengths", "block_table": "block_table",
                 "attention_metadata": "attention_metadata"}


@pytest.mark.parametrize("filename", ["model.onnx", ORT_HEAD_FILE])
def test_paged_attention_is_configured_like_the_dense_group_query_attention(arch, dense_and_paged, filename):
    for dense, gqa, paged, pa in _pairs(dense_and_paged, filename, "GroupQueryAttention", "PagedAttention"):
        gqa_attrs, pa_attrs = effective_attributes(gqa), effective_attributes(pa)
        shared = (set(gqa_attrs) & set(pa_attrs)) - NOT_COMPARED
        assert {"num_heads", "kv_num_heads", "scale", "softcap", "do_rotary", "local_window_size"} <= shared
        assert {a: pa_attrs[a] for a in shared} == {a: gqa_attrs[a] for a in shared}, pa.name
        # Independently of the dense graph: the architecture's head counts and 1/sqrt(head_dim).
        assert (pa_attrs["num_heads"], pa_attrs["kv_num_heads"]) == (arch.num_attention_heads, arch.num_key_value_heads)
        assert pa_attrs["scale"] == pytest.approx(arch.head_dim**-0.5)
        assert pa_attrs["is_causal"] == 1 and pa_attrs["kv_cache_layout"] == b"SEPARATE"

        gqa_in, pa_in = bound_inputs(gqa), bound_inputs(pa)
        for role in ("query", "key", "value"):
            # Same step (node scope): the dense CPU graph rotates with one RotaryEmbedding, the packed
            # [N, X] layout spells the rotation out (profiles/kernels.py).
            assert _step(paged.origin(pa_in[role])) == _step(dense.origin(gqa_in[role])), (pa.name, role)
        assert (pa_in["key_cache"], pa_in["value_cache"]) == (gqa_in["past_key"], gqa_in["past_value"])
        assert {role: pa_in[role] for role in PAGED_CONTROL} == PAGED_CONTROL
        assert set(PAGED_CONTROL.values()) <= paged.inputs
        # Rotary and q/k norms run before the op; slots derive from the past lengths.
        assert all(v == "" for r, v in pa_in.items() if r not in ("query", "key", "value", "key_cache",
                                                                   "value_cache", *PAGED_CONTROL)), pa.name
        gqa_out, pa_out = bound_outputs(gqa), bound_outputs(pa)
        assert (pa_out["key_cache_out"], pa_out["value_cache_out"]) == (gqa_out["present_key"],
                                                                         gqa_out["present_value"])


def test_gated_delta_net_computes_what_the_dense_linear_attention_does(arch, dense_and_paged):
    la_dims = arch.linear_attention
    for dense, la, paged, gdn in _pairs(dense_and_paged, "model.onnx", "LinearAttention", "GatedDeltaNet"):
        la_attrs, gdn_attrs = effective_attributes(la), effective_attributes(gdn)
        assert gdn_attrs["scale"] == pytest.approx(la_attrs["scale"]) == pytest.approx(la_dims.key_head_dim**-0.5)
        assert gdn_attrs["update_rule"] == la_attrs["update_rule"] == b"gated_delta"
        # The graph itself L2-normalises q/k and computes the log-space gate and sigmoid beta (the same nodes
        # feed the dense LinearAttention, checked below), so the op must not apply them a second time.
        assert gdn_attrs["qk_l2_norm"] == 0
        assert gdn_attrs["gate_activation"] == gdn_attrs["beta_activation"] == b"none"

        la_in, gdn_in = bound_inputs(la), bound_inputs(gdn)
        for role in ("query", "key", "value", "decay", "beta"):
            assert paged.origin(gdn_in[role]) == dense.origin(la_in[role]), (gdn.name, role)
        assert paged.origin(gdn_in["query"]).endswith("/q_l2norm/Div")
        # Spelled out, or one LinearAttentionGate computing both (profiles/kernels.py).
        assert paged.origin(gdn_in["decay"]).endswith(("/decay/Mul", "/gate/LinearAttentionGate"))
        assert paged.origin(gdn_in["beta"]).endswith(("/beta/Sigmoid", "/gate/LinearAttentionGate"))
        assert gdn_in["initial_state"] == la_in["past_state"] and gdn_in["initial_state"] in paged.inputs
        assert gdn_in["cu_seqlens"] == "cumulative_sequence_lengths"
        assert gdn_in["a_log"] == gdn_in["dt_bias"] == ""  # the gate arrives computed
        assert bound_outputs(gdn)["final_state"] == bound_outputs(la)["present_state"]


def test_varlen_causal_conv_is_configured_like_the_dense_causal_conv(dense_and_paged):
    for dense, conv, paged, varlen in _pairs(dense_and_paged, "model.onnx", "CausalConvWithState",
                                            "VarlenCausalConvWithState"):
        conv_attrs, varlen_attrs = effective_attributes(conv), effective_attributes(varlen)
        shared = set(conv_attrs) & set(varlen_attrs)
        assert "activation" in shared and conv_attrs["activation"] == b"silu"
        assert {a: varlen_attrs[a] for a in shared} == {a: conv_attrs[a] for a in shared}, varlen.name
        conv_in, varlen_in = bound_inputs(conv), bound_inputs(varlen)
        assert paged.origin(varlen_in["input"]) == dense.origin(conv_in["input"])
        assert varlen_in["weight"] == conv_in["weight"] and varlen_in["weight"] in paged.initializers
        assert varlen_in["initial_state"] == conv_in["past_state"]
        assert varlen_in["cumulative_sequence_length"] == "cumulative_sequence_lengths"
        assert varlen_in["bias"] == conv_in["bias"] == ""
        assert bound_outputs(varlen)["final_state"] == bound_outputs(conv)["present_state"]


def test_state_update_captures_are_bound_where_the_op_schemas_read_them(arch, tmp_path):
    from dataclasses import replace

    from mtpc.passes.paged_io import with_state_updates

    ir = make_ir(arch, io_dtype="float16", paged=True)
    ir = replace(ir, main=with_state_updates(ir.main, arch, 3))
    emit(ir, seeded_store(arch, 0), tmp_path / "pkg")
    graph = Graph(tmp_path / "pkg" / "model.onnx")
    for layer, node in graph.nodes("GatedDeltaNet").items():
        i = int(layer.split(".")[1].split("/")[0])
        inputs, outputs = bound_inputs(node), bound_outputs(node)
        assert (inputs["capture_count"], inputs["state_update_active"]) == ("state_update_capture_count",
                                                                           "state_update_active")
        assert inputs["a_log"] == inputs["dt_bias"] == ""
        assert outputs["state_update"] == f"state_update.{i}.recurrent_capsule"
        assert effective_attributes(node)["state_update_capacity"] == 3
    for layer, node in graph.nodes("VarlenCausalConvWithState").items():
        i = int(layer.split(".")[1].split("/")[0])
        assert bound_inputs(node)["capture_count"] == "state_update_capture_count"
        assert bound_outputs(node)["state_update"] == f"state_update.{i}.conv_value"
        assert effective_attributes(node)["state_update_capacity"] == 3
