"""The kernels' own `state_window` attribute (com.microsoft CausalConvWithState and LinearAttention, CUDA
kernels only in onnxruntime 1.32) lowered to ops onnxruntime runs on CPU.

Written from the contract (the 0.18.0 builder's `builders/base.py` comments and onnxruntime-genai's
`recurrent_state.cpp`): past and present are `[W, B, ...]`; the op reads past slot W - 1 only; present
slot j is the state after token T - W + j of the T tokens run (right-aligned), zero when that token lies
before the forward (j < W - T); the output is the unwindowed op's on past slot W - 1.

- conv: the state after token t is the K - 1 inputs ending at t, columns t + 1 .. t + K - 1 of
  `[past slot W-1 | x]` (column c is token c - (K - 1));
- recurrence: a Loop over the W slots, each running the unwindowed op over tokens 0 .. t from past
  slot W - 1 (quadratic, fine for tests), its state zeroed where t < 0.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WINDOWED_OPS = ("CausalConvWithState", "LinearAttention")


def _window(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "state_window"), 0)


def _without_window(node: onnx.NodeProto, inputs: list[str], outputs: list[str], name: str) -> onnx.NodeProto:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "state_window"}
    return helper.make_node(node.op_type, inputs, outputs, name=name, domain=node.domain, **attrs)


class _Lowering:
    def __init__(self, node: onnx.NodeProto, consts: list[onnx.TensorProto]):
        self.node, self.consts, self.nodes = node, consts, []
        self.prefix = f"{node.name}/lowered"
        self.window = _window(node)

    def const(self, tag: str, value) -> str:
        name = f"{self.prefix}/{tag}"
        self.consts.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], tag: str, **attrs) -> str:
        out = f"{self.prefix}/{tag}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def slot_tokens(self, x: str, token_axis: int) -> str:
        """`[W]` int64: the token T - W + j whose state slot j holds."""
        tokens = self.op("Gather", [self.op("Shape", [x], "shape"), self.const("token_axis", np.int64(token_axis))],
                         "tokens", axis=0)
        return self.op("Add", [tokens, self.const("slot_offsets", np.arange(self.window, dtype=np.int64) - self.window)],
                       "slot_tokens")

    def last_past(self, past: str) -> str:
        return self.op("Gather", [past, self.const("last_slot", np.int64(self.window - 1))], "past_last", axis=0)


def _lower_conv(node: onnx.NodeProto, consts: list, kernel: int) -> list[onnx.NodeProto]:
    low = _Lowering(node, consts)
    x, weight, bias, past = (list(node.input) + [""] * 4)[:4]
    last = low.last_past(past)
    low.nodes.append(_without_window(node, [x, weight, bias, last], [node.output[0], f"{low.prefix}/unused"],
                                     f"{low.prefix}/op"))
    t = low.slot_tokens(x, 2)
    history = low.op("Concat", [last, x], "history", axis=2)
    columns = low.op("Add", [low.op("Unsqueeze", [t, low.const("axis_last", np.asarray([-1], np.int64))], "t_col"),
                             low.const("tail", np.arange(kernel - 1, dtype=np.int64) + 1)], "columns")
    columns = low.op("Max", [columns, low.const("zero", np.int64(0))], "columns_clamped")
    windows = low.op("Gather", [history, columns], "windows", axis=2)  # [B, C, W, K-1]
    valid = low.op("Reshape", [low.op("GreaterOrEqual", [t, low.const("zero_t", np.int64(0))], "valid"),
                               low.const("valid_shape", np.asarray([1, 1, low.window, 1], np.int64))], "valid_4d")
    zero = low.op("CastLike", [low.const("zero_f", np.float32(0)), windows], "zero_like")
    kept = low.op("Where", [valid, windows, zero], "kept")
    low.nodes.append(helper.make_node("Transpose", [kept], [node.output[1]], name=f"{low.prefix}/slots",
                                      perm=[2, 0, 1, 3]))
    return low.nodes


def _lower_recurrence(node: onnx.NodeProto, consts: list, state_type: onnx.TypeProto) -> list[onnx.NodeProto]:
    low = _Lowering(node, consts)
    q, k, v, past, decay, beta = (list(node.input) + [""] * 6)[:6]
    last = low.last_past(past)
    low.nodes.append(_without_window(node, [q, k, v, last, decay, beta], [node.output[0], f"{low.prefix}/unused"],
                                     f"{low.prefix}/op"))
    t = low.slot_tokens(q, 1)
    # Loop body: slot j's state is the op over tokens 0 .. t_j from past slot W - 1, zero where t_j < 0.
    b = f"{low.prefix}/body"
    body_nodes = [
        helper.make_node("Gather", [t, "j"], [f"{b}/t"], axis=0),
        helper.make_node("Add", [f"{b}/t", f"{b}/one"], [f"{b}/t1"]),
        helper.make_node("Max", [f"{b}/t1", f"{b}/zero"], [f"{b}/end_scalar"]),
        helper.make_node("Unsqueeze", [f"{b}/end_scalar", f"{b}/axis0"], [f"{b}/end"]),
        *[helper.make_node("Slice", [x, f"{b}/start", f"{b}/end", f"{b}/axis1"], [f"{b}/{i}"])
          for i, x in enumerate((q, k, v, decay, beta)) if x],
        _without_window(node, [f"{b}/0", f"{b}/1", f"{b}/2", last, f"{b}/3" if decay else "", f"{b}/4" if beta else ""],
                        [f"{b}/out", f"{b}/state"], f"{b}/op"),
        helper.make_node("GreaterOrEqual", [f"{b}/t", f"{b}/zero"], [f"{b}/valid"]),
        helper.make_node("CastLike", [f"{b}/zero_f", f"{b}/state"], [f"{b}/zero_like"]),
        helper.make_node("Where", [f"{b}/valid", f"{b}/state", f"{b}/zero_like"], [f"{b}/slot"]),
        helper.make_node("Identity", ["cond"], [f"{b}/cond_out"]),
    ]
    body_consts = [numpy_helper.from_array(np.asarray(v), f"{b}/{n}") for n, v in (
        ("one", np.int64(1)), ("zero", np.int64(0)), ("axis0", np.asarray([0], np.int64)),
        ("start", np.asarray([0], np.int64)), ("axis1", np.asarray([1], np.int64)), ("zero_f", np.float32(0)))]
    body = helper.make_graph(
        body_nodes, f"{b}/graph",
        [helper.make_tensor_value_info("j", TensorProto.INT64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(f"{b}/cond_out", TensorProto.BOOL, []),
         helper.make_value_info(f"{b}/slot", state_type)],
        initializer=body_consts)
    low.nodes.append(helper.make_node("Loop", [low.const("trips", np.int64(low.window)), ""], [node.output[1]],
                                      name=f"{low.prefix}/Loop", body=body))
    return low.nodes


def lower_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every windowed CausalConvWithState / LinearAttention of its main graph lowered."""
    graph = model.graph
    shapes = {t.name: t for t in list(graph.input) + list(graph.value_info) + list(graph.output)}
    kernels = {t.name: t.dims for t in graph.initializer}
    consts: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type not in WINDOWED_OPS or not _window(node):
            nodes.append(node)
        elif node.op_type == "CausalConvWithState":
            nodes.extend(_lower_conv(node, consts, int(kernels[node.input[1]][-1])))
        else:
            past = shapes[node.input[3]].type
            state = onnx.TypeProto()
            state.CopyFrom(past)
            del state.tensor_type.shape.dim[0]  # one slot: [B, H, dk, dv]
            nodes.extend(_lower_recurrence(node, consts, state))
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(consts)
    return model
