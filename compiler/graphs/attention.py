"""Attention by a layer's own geometry (`ir.LayerAttention`): its heads, a sliding window, sinks, a value head
narrower than the key head. Families whose layers differ in how they attend (Step-3.5's sliding layers, MiMo's)
build their blocks with `attend`; the others keep `SequenceOps.attention`.

    out, present_key, present_value = attend(b, ops, q, k, v, past_key, past_value, layer, layer_sinks(b, layer, prefix))

q `[.., NH*HD]`, k `[.., KVH*HD]`, v `[.., KVH*VD]`, already normed and rotated; `out` is `[.., NH*VD]`.
The cache keeps keys and values `HD` wide (`LayerAttention.cached_head_dim`): a narrower value head is
zero-padded into it, and the padding's zero outputs are sliced off after the attention (exact).

Two forms of the same function:

- the kernels: `GroupQueryAttention` (dense) or `PagedAttention` (paged) with `local_window_size` and their
  `head_sink` input;
- a dense sliding layer on a provider where `FusedKernels.window_group_query_attention` is off (the CPU):
  plain ops over only the last `W + S - 1` cached tokens (`windowed_attention` below). onnxruntime's CPU
  GroupQueryAttention scores every cached token and masks the window afterwards, so its decode step grows with
  the context while this one stays `O(W)`: bench/sliding_attention.py, bench/README.md.

Both attend to the `window` tokens ending at the query, its own included, as transformers' sliding mask does
(`kv > q - W`): tests/graphs/test_attention.py holds them to transformers' own eager attention with sinks.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import LayerAttention
from .blocks import SequenceOps, initializer_name, merge_heads, split_heads
from .builder import GraphBuilder


def layer_sinks(b: GraphBuilder, layer: LayerAttention, prefix: str) -> oir.Value | None:
    """Layer `prefix`'s sink logits `{prefix}self_attn.sinks` `[NH]`, or None when it has none."""
    if not layer.sinks:
        return None
    canonical = prefix + "self_attn.sinks"
    (sinks,) = b.weights(b.params.tensor(canonical, initializer_name(canonical)))
    return sinks


def attend(b: GraphBuilder, ops: SequenceOps, q: oir.Value, k: oir.Value, v: oir.Value, past_key: oir.Value,
           past_value: oir.Value, layer: LayerAttention, sinks: oir.Value | None
           ) -> tuple[oir.Value, oir.Value, oir.Value]:
    """-> (out, present key, present value); `sinks` `[NH]` when the layer has them (`layer_sinks`)."""
    if layer.sinks != (sinks is not None):
        raise AssertionError("a layer with sinks attends with its sink logits, and only such a layer")
    nh, kvh, hd, vd = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim, layer.value_head_dim
    padded = vd < hd
    if padded:
        heads = split_heads(b, ops, v, kvh, vd, "v/Reshape")
        pads = [0] * (ops.lead + 2) + [0] * (ops.lead + 1) + [hd - vd]
        v = merge_heads(b, ops, b.op("Pad", [heads, b.i64(f"pad_{hd - vd}_rank{ops.lead + 2}", pads)], name="v/Pad"),
                        kvh * hd, "v/merge")
    if layer.window is not None and not b.kernels.window_group_query_attention and hasattr(ops, "window_mask"):
        out, present_key, present_value = windowed_attention(b, ops, q, k, v, past_key, past_value, layer, sinks)
    else:
        out, present_key, present_value = ops.layer_attention(b, q, k, v, past_key, past_value, layer, sinks)
    if padded:
        heads = split_heads(b, ops, out, nh, hd, "out/Reshape")
        kept = b.op("Slice", [heads, b.i64("zero_1d", [0]), b.i64(f"end_{vd}", [vd]), b.i64("axis_last", [-1])],
                    name="out/Slice")
        out = merge_heads(b, ops, kept, nh * vd, "out/merge")
    return out, present_key, present_value


class WindowMask:
    """The `allowed` mask of a dense graph's sliding layers, `[B, 1, S*G, L]` (bool), built once per (window, group):
    query row `s*G + g` (token s of the S new ones, query head g of a KV head's G) may read key `j` of the last
    `L = min(T, W + S - 1)` cached slots when that slot is in the attention mask, not after the query, and less than
    `W` slots before it. Cache slot t is mask column t (the dense cache grows by concatenation)."""

    def __init__(self, attention_mask: oir.Value):
        self.attention_mask = attention_mask
        self._built: dict[tuple[int, int], tuple[oir.Value, oir.Value]] = {}

    def allowed(self, b: GraphBuilder, q: oir.Value, window: int, group: int) -> tuple[oir.Value, oir.Value]:
        """(allowed `[B, 1, S*G, L]`, the first kept slot's start for Slice `[1]`, negative: `-(W + S - 1)`)."""
        if (window, group) in self._built:
            return self._built[window, group]
        with b.scope(f"window_mask_{window}_{group}"):
            zero, one = b.i64("zero", [0]), b.i64("one", [1])
            width = b.op("Shape", [self.attention_mask], {"start": 1, "end": 2}, name="width")  # T, [1]
            new = b.op("Shape", [q], {"start": 1, "end": 2}, name="new")  # S, [1]
            kept = b.op("Add", [new, b.i64(f"window_less_one_{window}", [window - 1])], name="kept")  # W + S - 1
            start = b.op("Neg", [kept], name="start")
            first = b.op("Max", [b.op("Sub", [width, kept], name="first_slot"), zero], name="first")  # T - L
            step = b.constant("step", np.asarray(1, np.int64))
            end = b.op("Squeeze", [width], name="end")
            slots = b.op("Range", [b.op("Squeeze", [first], name="slot_start"), end, step], name="slots")  # [L]
            rows = b.op("Range", [b.op("Squeeze", [b.op("Sub", [width, new], name="past")], name="row_start"), end,
                                  step], name="rows")  # [S], the queries' slots
            slot_row = b.op("Unsqueeze", [slots, zero], name="slots_row")  # [1, L]
            query_col = b.op("Unsqueeze", [rows, one], name="rows_col")  # [S, 1]
            causal = b.op("LessOrEqual", [slot_row, query_col], name="causal")
            oldest = b.op("Sub", [query_col, b.i64(f"window_{window}", [window])], name="oldest")
            inside = b.op("Greater", [slot_row, oldest], name="inside")
            valid = b.op("Cast", [b.op("Gather", [self.attention_mask, slots], {"axis": 1}, name="valid_slots")],
                         {"to": oir.DataType.BOOL}, name="valid")  # [B, L]
            allowed = b.op("And", [b.op("Unsqueeze", [valid, one], name="valid_rows"),
                                   b.op("And", [causal, inside], name="in_window")], name="allowed")  # [B, S, L]
            per_group = b.op("Expand", [b.op("Unsqueeze", [allowed, b.i64("axis_2", [2])], name="group_axis"),
                                        b.i64(f"group_{group}", [1, 1, group, 1])], name=f"expand_{group}")
            shape = b.op("Concat", [b.i64("keep_1_minus1", [0, 1, -1]), b.op("Shape", [allowed], {"start": 2},
                                                                            name="slots_shape")], {"axis": 0},
                         name="rows_shape")
            folded = b.op("Reshape", [per_group, shape], name="fold")  # [B, 1, S*G, L]
        self._built[window, group] = (folded, start)
        return folded, start


def windowed_attention(b: GraphBuilder, ops, q: oir.Value, k: oir.Value, v: oir.Value, past_key: oir.Value,
                       past_value: oir.Value, layer: LayerAttention, sinks: oir.Value | None
                       ) -> tuple[oir.Value, oir.Value, oir.Value]:
    """A dense sliding layer in plain ops: the cache grows by concatenation (the dense contract), the scores are
    computed over its last `W + S - 1` slots only, one GEMM per KV head with its G query heads folded into rows."""
    nh, kvh, hd = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim
    group = nh // kvh
    dtype = b.io_dtype.numpy()
    allowed, start = ops.window_mask.allowed(b, q, layer.window, group)
    with b.scope("windowed_attention"):
        bnsh = [0, 2, 1, 3]
        new_k = b.op("Transpose", [split_heads(b, ops, k, kvh, hd, "k/Reshape")], {"perm": bnsh}, name="k/Transpose")
        new_v = b.op("Transpose", [split_heads(b, ops, v, kvh, hd, "v/Reshape")], {"perm": bnsh}, name="v/Transpose")
        present_key = b.op("Concat", [past_key, new_k], {"axis": 2}, name="present_key/Concat")
        present_value = b.op("Concat", [past_value, new_v], {"axis": 2}, name="present_value/Concat")
        big, axis_2 = b.i64("int64_max", [np.iinfo(np.int64).max]), b.i64("axis_2", [2])
        keys = b.op("Slice", [present_key, start, big, axis_2], name="keys/Slice")  # [B, KVH, L, HD]
        values = b.op("Slice", [present_value, start, big, axis_2], name="values/Slice")
        # q [B, S, NH*HD] -> [B, S, KVH, G, HD] -> [B, KVH, S, G, HD] -> [B, KVH, S*G, HD]
        scaled = b.op("Mul", [q, b.constant("softmax_scale", np.asarray(layer.softmax_scale, dtype))], name="q/Scale")
        grouped = b.op("Reshape", [scaled, b.i64(f"q_groups_{kvh}x{group}x{hd}", [0, 0, kvh, group, hd])],
                       name="q/Reshape")
        rows = b.op("Transpose", [grouped], {"perm": [0, 2, 1, 3, 4]}, name="q/Transpose")
        rows = b.op("Reshape", [rows, b.i64(f"q_rows_{kvh}x{hd}", [0, kvh, -1, hd])], name="q/rows")
        scores = b.op("MatMul", [rows, b.op("Transpose", [keys], {"perm": [0, 1, 3, 2]}, name="keys/Transpose")],
                      name="scores/MatMul")  # [B, KVH, S*G, L]
        lowest = b.constant("lowest", np.asarray(np.finfo(dtype).min, dtype))
        scores = b.op("Where", [allowed, scores, lowest], name="scores/Where")
        if sinks is not None:
            # Head kvh_i * G + g's sink joins row s*G + g of KV head kvh_i: [NH] -> [1, KVH, 1, G] -> [B, KVH, S, G].
            per_head = b.op("Reshape", [sinks, b.i64(f"sinks_{kvh}x{group}", [1, kvh, 1, group])], name="sinks/Reshape")
            one = b.i64("one", [1])
            spread = b.op("Concat", [b.op("Shape", [q], {"end": 1}, name="sinks/batch"), one,
                                     b.op("Shape", [q], {"start": 1, "end": 2}, name="sinks/tokens"), one],
                          {"axis": 0}, name="sinks/spread")  # [B, 1, S, 1]
            tiled = b.op("Expand", [per_head, spread], name="sinks/Expand")
            column = b.op("Reshape", [tiled, b.i64(f"sink_column_{kvh}", [0, kvh, -1, 1])], name="sinks/column")
            scores = b.op("Concat", [scores, column], {"axis": -1}, name="scores/sinks")
        probs = b.op("Softmax", [scores], {"axis": -1}, name="Softmax")
        if sinks is not None:
            probs = b.op("Slice", [probs, b.i64("zero_1d", [0]), b.i64("minus_one_1d", [-1]),
                                   b.i64("axis_last", [-1])], name="probs/drop_sinks")
        out = b.op("MatMul", [probs, values], name="out/MatMul")  # [B, KVH, S*G, HD]
        out = b.op("Reshape", [out, b.i64(f"out_groups_{kvh}x{group}x{hd}", [0, kvh, -1, group, hd])],
                   name="out/Reshape")
        out = b.op("Transpose", [out], {"perm": [0, 2, 1, 3, 4]}, name="out/Transpose")
        out = b.op("Reshape", [out, b.i64(f"tokens_{nh * hd}", [0, 0, nh * hd])], name="out/merge")
    return out, present_key, present_value
