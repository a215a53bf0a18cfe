"""PagedAttention (com.microsoft, CUDA only) lowered to standard ONNX ops that onnxruntime runs on CPU.

Written from the op's schema in onnxruntime 1.32 (see `reference.py` for the contract in words):

1. Each packed token t finds its sequence b (how many `cumulative_sequence_length[1:]` ends are
   <= t), its local index, its position `past_seqlens[b] + local` and its cache slot
   `block_table[b, pos // block_size] * block_size + pos % block_size`.
2. The new keys/values are scattered into the flattened `[num_blocks * block_size, Hkv, D]` caches
   (ScatterND); the updated caches are the `key_cache_out` / `value_cache_out` outputs (the op
   aliases them with its inputs; a copy is equivalent when the caller feeds them back).
3. Every token gathers positions `0 .. max_total_length - 1` of its sequence through the block
   table, masks those after its own position (and before its window when `local_window_size` is
   set), and attends in float32 (the CUDA kernels accumulate in float32) with query head h reading
   kv head `h // (num_heads / kv_num_heads)`.

Only what the contract defines without the optional inputs is lowered: rotary, q/k norms, slot
mapping, head sinks, quantized or latent caches and packed QKV are refused rather than ignored.
`attention_metadata` is a launch-sizing hint that never changes results, so it is dropped.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
# Schema input positions.
QUERY, KEY, VALUE, KEY_CACHE, VALUE_CACHE, CU_SEQLENS, PAST_SEQLENS, BLOCK_TABLE = range(8)
ATTENTION_METADATA = 16
SUPPORTED_ATTRIBUTES = {"num_heads", "kv_num_heads", "scale", "softcap", "local_window_size", "is_causal"}
# Attributes whose default is the only value lowered.
DEFAULT_ONLY = {"do_rotary": 0, "rotary_interleaved": 0, "kv_cache_layout": b"SEPARATE", "k_quant_type": b"NONE",
                "v_quant_type": b"NONE", "k_cache_dtype": b"", "v_cache_dtype": b"", "rotary_offset": 0,
                "v_head_size": 0}


class _Emitter:
    """Appends uniquely named nodes and constants under one prefix."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, local: str) -> str:
        self._count += 1
        return f"{self.prefix}/{local}_{self._count}"

    def op(self, op_type: str, inputs: list[str], output: str | None = None, **attrs) -> str:
        node_name = self.name(op_type)
        output = output or f"{node_name}/output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=node_name, **attrs))
        return output

    def const(self, local: str, value) -> str:
        name = self.name(local)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name


def _attributes(node: onnx.NodeProto) -> dict:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    for name, default in DEFAULT_ONLY.items():
        if name in attrs and attrs[name] != default:
            raise NotImplementedError(f"{node.name}: PagedAttention lowering has no {name}={attrs[name]!r}")
    unknown = set(attrs) - SUPPORTED_ATTRIBUTES - set(DEFAULT_ONLY) - {"qk_norm_epsilon"}
    if unknown:
        raise NotImplementedError(f"{node.name}: PagedAttention lowering does not know attributes {sorted(unknown)}")
    return attrs


def lower_paged_attention(node: onnx.NodeProto, head_size: int, io_type: int) -> _Emitter:
    """Nodes computing `node`'s three outputs from its inputs with standard ops.

    `head_size` is the caches' static last dimension, `io_type` the query's element type.
    """
    attrs = _attributes(node)
    inputs = list(node.input) + [""] * (17 - len(node.input))
    for index, name in enumerate(inputs):
        if name and index > BLOCK_TABLE and index != ATTENTION_METADATA:
            raise NotImplementedError(f"{node.name}: PagedAttention lowering has no optional input {index} ({name})")
    if not inputs[KEY] or not inputs[VALUE_CACHE]:
        raise NotImplementedError(f"{node.name}: packed QKV and latent caches are not lowered")
    num_heads, kv_heads = attrs["num_heads"], attrs["kv_num_heads"]
    group = num_heads // kv_heads
    scale = attrs.get("scale") or head_size**-0.5
    softcap = attrs.get("softcap", 0.0)
    window = attrs.get("local_window_size", -1)
    causal = attrs.get("is_causal", 1)
    q, k, v, key_cache, value_cache, cu, past, table = inputs[:8]
    out, key_out, value_out = (list(node.output) + ["", "", ""])[:3]

    e = _Emitter(f"{node.name}/cpu_lowering")
    i64 = TensorProto.INT64
    zero, one = e.const("zero", np.int64(0)), e.const("one", np.int64(1))
    axis0, axis1 = e.const("axis0", np.array([0], np.int64)), e.const("axis1", np.array([1], np.int64))
    cu64, past64, table64 = (e.op("Cast", [t], to=i64) for t in (cu, past, table))

    # ---- where each packed token goes
    cache_shape = e.op("Shape", [key_cache])
    block_size = e.op("Gather", [cache_shape, one], axis=0)
    tail = e.op("Slice", [cache_shape, e.const("two", np.array([2], np.int64)), e.const("four", np.array([4], np.int64))])
    flat_cache_shape = e.op("Concat", [e.const("minus_one", np.array([-1], np.int64)), tail], axis=0)
    num_tokens = e.op("Gather", [e.op("Shape", [q]), zero], axis=0)
    tokens = e.op("Range", [zero, num_tokens, one])
    starts = e.op("Slice", [cu64, e.const("s0", np.array([0], np.int64)), e.const("sm1", np.array([-1], np.int64))])
    ends = e.op("Slice", [cu64, e.const("e1", np.array([1], np.int64)),
                          e.const("emax", np.array([np.iinfo(np.int64).max], np.int64))])
    ended = e.op("GreaterOrEqual", [e.op("Unsqueeze", [tokens, axis1]), e.op("Unsqueeze", [ends, axis0])])
    sequence = e.op("ReduceSum", [e.op("Cast", [ended], to=i64), axis1], keepdims=0)  # [N]
    local = e.op("Sub", [tokens, e.op("Gather", [starts, sequence], axis=0)])
    position = e.op("Add", [e.op("Gather", [past64, sequence], axis=0), local])  # [N]
    token_table = e.op("Gather", [table64, sequence], axis=0)  # [N, max_blocks]
    # Unmapped pages (-1) are never read unmasked; clamp them to a valid address.
    token_table = e.op("Max", [token_table, zero])

    def slots(positions: str, rows: str) -> str:
        """Cache slots of `positions` ([N] or [N, L]) through each token's block-table row."""
        columns = e.op("Div", [positions, block_size])
        if rows == "per_token_scalar":
            blocks = e.op("GatherElements", [token_table, e.op("Unsqueeze", [columns, axis1])], axis=1)
            blocks = e.op("Squeeze", [blocks, axis1])
        else:
            blocks = e.op("GatherElements", [token_table, columns], axis=1)
        return e.op("Add", [e.op("Mul", [blocks, block_size]), e.op("Mod", [positions, block_size])])

    write_slots = e.op("Unsqueeze", [slots(position, "per_token_scalar"), axis1])  # [N, 1]

    # ---- write the new keys / values
    written = []
    for new, cache, result in ((k, key_cache, key_out), (v, value_cache, value_out)):
        flat = e.op("Reshape", [cache, flat_cache_shape])
        rows = e.op("Reshape", [new, flat_cache_shape])
        updated = e.op("ScatterND", [flat, write_slots, rows])
        e.op("Reshape", [updated, cache_shape], output=result or None)
        written.append(updated)

    # ---- gather each token's visible keys / values
    lengths = e.op("Add", [past64, e.op("Sub", [ends, starts])])  # [B] total lengths
    longest = e.op("ReduceMax", [lengths], keepdims=0)
    key_positions = e.op("Range", [zero, longest, one])  # [L]
    grid = e.op("Expand", [e.op("Unsqueeze", [key_positions, axis0]),
                           e.op("Concat", [e.op("Unsqueeze", [num_tokens, axis0]),
                                           e.op("Unsqueeze", [longest, axis0])], axis=0)])  # [N, L]
    # Positions past a sequence's table would index outside its row: clamp (they are masked).
    table_span = e.op("Mul", [e.op("Gather", [e.op("Shape", [table]), one], axis=0), block_size])
    clamped = e.op("Min", [grid, e.op("Sub", [table_span, one])])
    read_slots = slots(clamped, "grid")
    query_position = e.op("Unsqueeze", [position, axis1])  # [N, 1]
    if causal:
        visible = e.op("LessOrEqual", [grid, query_position])
    else:
        sequence_length = e.op("Unsqueeze", [e.op("Gather", [lengths, sequence], axis=0), axis1])
        visible = e.op("Less", [grid, sequence_length])
    if window >= 0:
        oldest = e.op("Sub", [query_position, e.const("window", np.int64(window - 1))])
        visible = e.op("And", [visible, e.op("GreaterOrEqual", [grid, oldest])])

    f32 = TensorProto.FLOAT
    head_shape = e.const("head_shape", np.array([0, kv_heads, group, head_size], np.int64))
    query = e.op("Reshape", [e.op("Cast", [q], to=f32), head_shape])  # [N, Hkv, G, D]
    keys = e.op("Cast", [e.op("Gather", [written[0], read_slots], axis=0)], to=f32)  # [N, L, Hkv, D]
    values = e.op("Cast", [e.op("Gather", [written[1], read_slots], axis=0)], to=f32)
    scores = e.op("MatMul", [query, e.op("Transpose", [keys], perm=[0, 2, 3, 1])])  # [N, Hkv, G, L]
    scores = e.op("Mul", [scores, e.const("scale", np.float32(scale))])
    if softcap:
        cap = e.const("softcap", np.float32(softcap))
        scores = e.op("Mul", [e.op("Tanh", [e.op("Div", [scores, cap])]), cap])
    bias = e.op("Where", [visible, e.const("open", np.float32(0.0)), e.const("closed", np.float32(-np.inf))])
    bias = e.op("Unsqueeze", [bias, e.const("axes12", np.array([1, 2], np.int64))])  # [N, 1, 1, L]
    probs = e.op("Softmax", [e.op("Add", [scores, bias])], axis=-1)
    attended = e.op("MatMul", [probs, e.op("Transpose", [values], perm=[0, 2, 1, 3])])  # [N, Hkv, G, D]
    merged = e.op("Reshape", [attended, e.const("out_shape", np.array([0, num_heads * head_size], np.int64))])
    e.op("Cast", [merged], output=out, to=io_type)
    return e


def lower_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every PagedAttention node replaced by its lowering, in place in the node order."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    shapes = {v.name: v.type.tensor_type for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
    nodes = []
    for node in graph.node:
        if not (node.op_type == "PagedAttention" and node.domain == MS):
            nodes.append(node)
            continue
        cache = shapes[node.input[KEY_CACHE]]
        head_size = cache.shape.dim[-1].dim_value
        if not head_size:
            raise NotImplementedError(f"{node.name}: the key cache needs a static head size")
        lowered = lower_paged_attention(node, head_size, cache.elem_type)
        nodes.extend(lowered.nodes)
        graph.initializer.extend(lowered.initializers)
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(n.domain == MS for n in graph.node):
        kept = [o for o in model.opset_import if o.domain != MS]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    return model
