"""MLA's absorbed attention spelled out in plain ops for dense `[B, S, X]` graphs, heads folded into GEMM rows.

The absorbed form has ONE key / value head, `latent_dim` wide, shared by every query head. GroupQueryAttention
runs it head by head; here every (token, head) query is one row of a single MatMul against the cached latent:

    present      = Concat(past, latent)                  # [B, 1, T, L]: the dense cache contract, K and V alike
    scores       = (query * scale)[B, S*nh, L] @ present[B, T, L]^T          -> [B, S*nh, T]
    probs        = softmax(Where(allowed, scores, lowest))                  # allowed: mask and causality
    out          = probs @ present[B, T, L]                                  -> [B, S, nh*L], GQA's output layout

`allowed[b, s, t]` is `attention_mask[b, t] == 1 and t <= T - S + s`: the cache grows by concatenation
(past_present_share_buffer false, as the dense profile sets it), so cache slot t is mask column t, and the
S new tokens sit in the last S slots; pads anywhere (left or right) are never attended to. A query whose row
allows nothing (a pad token of a left-padded prompt) gets a uniform softmax over finite scores, never NaN.
The bool mask is built once per graph and shared by every layer. onnxruntime fuses the Transpose into the
MatMul (FusedMatMul, transB) on CPU, so the cache is read in place, not transposed per step.

Why not GroupQueryAttention: measured faster at decode on CPU (bench/mla_forms.py, bench/README.md), where
`profiles/kernels.py` chooses this form.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import Architecture
from .builder import GraphBuilder


class LatentMask:
    """The per-graph `allowed` mask `[B, S*nh, T]` (bool), built on first use from the graph's attention_mask."""

    def __init__(self, attention_mask: oir.Value):
        self.attention_mask = attention_mask
        self._built: dict[int, oir.Value] = {}

    def allowed(self, b: GraphBuilder, latent: oir.Value, heads: int) -> oir.Value:
        if heads in self._built:
            return self._built[heads]
        with b.scope("latent_mask"):
            mask = self.attention_mask
            zero, one = b.i64("zero", [0]), b.i64("one", [1])
            width = b.op("Shape", [mask], {"start": 1, "end": 2}, name="width")  # T, [1]
            new = b.op("Shape", [latent], {"start": 1, "end": 2}, name="new")  # S, [1]
            step = b.constant("step", np.asarray(1, np.int64))
            end = b.op("Squeeze", [width], name="end")
            slots = b.op("Range", [b.constant("start", np.asarray(0, np.int64)), end, step], name="slots")  # [T]
            first = b.op("Sub", [width, new], name="past")  # the first new token's slot, [1]
            rows = b.op("Range", [b.op("Squeeze", [first], name="row_start"), end, step], name="rows")  # [S]
            causal = b.op("LessOrEqual", [b.op("Unsqueeze", [slots, zero], name="slots_row"),
                                          b.op("Unsqueeze", [rows, one], name="rows_col")], name="causal")  # [S, T]
            valid = b.op("Cast", [mask], {"to": oir.DataType.BOOL}, name="valid")  # [B, T]
            allowed = b.op("And", [b.op("Unsqueeze", [valid, one], name="valid_rows"), causal], name="allowed")
            # [B, S, T] -> [B, S, nh, T] -> [B, S*nh, T]: row s*nh + h is token s, head h (the query's layout).
            per_head = b.op("Expand", [b.op("Unsqueeze", [allowed, b.i64("axis_2", [2])], name="heads_axis"),
                                       b.i64(f"heads_{heads}", [1, 1, heads, 1])], name=f"expand_{heads}")
            shape = b.op("Concat", [b.i64("keep_minus1", [0, -1]), width], {"axis": 0}, name="rows_shape")
            folded = b.op("Reshape", [per_head, shape], name=f"fold_{heads}")
        self._built[heads] = folded
        return folded


def latent_attention(b: GraphBuilder, mask: LatentMask, query: oir.Value, latent: oir.Value, past_key: oir.Value,
                     past_value: oir.Value, arch: Architecture) -> tuple[oir.Value, oir.Value, oir.Value]:
    """(out `[B, S, nh*L]`, present key, present value), as `DenseOps.attention` returns them for the latent."""
    nh, width = arch.num_attention_heads, arch.mla.latent_dim
    dtype = b.io_dtype.numpy()
    new = b.op("Unsqueeze", [latent, b.i64("axis_1", [1])], name="latent/Unsqueeze")  # [B, 1, S, L]
    present_key = b.op("Concat", [past_key, new], {"axis": 2}, name="present_key/Concat")
    present_value = b.op("Concat", [past_value, new], {"axis": 2}, name="present_value/Concat")
    rows_shape = b.i64(f"fold_rows_{width}", [0, -1, width])
    keys = b.op("Reshape", [present_key, rows_shape], name="keys/Reshape")  # [B, T, L]
    values = b.op("Reshape", [present_value, rows_shape], name="values/Reshape")
    q = b.op("Mul", [query, b.constant("softmax_scale", np.asarray(arch.softmax_scale, dtype))], name="q/Scale")
    q = b.op("Reshape", [q, rows_shape], name="q/Reshape")  # [B, S*nh, L]
    keys_t = b.op("Transpose", [keys], {"perm": [0, 2, 1]}, name="keys/Transpose")
    scores = b.op("MatMul", [q, keys_t], name="scores/MatMul")  # [B, S*nh, T]
    lowest = b.constant("lowest", np.asarray(np.finfo(dtype).min, dtype))
    scores = b.op("Where", [mask.allowed(b, latent, nh), scores, lowest], name="scores/Where")
    probs = b.op("Softmax", [scores], {"axis": -1}, name="Softmax")
    out = b.op("MatMul", [probs, values], name="latent_attention/MatMul")  # [B, S*nh, L]
    out = b.op("Reshape", [out, b.i64(f"tokens_{nh * width}", [0, -1, nh * width])], name="latent_attention/Reshape")
    return out, present_key, present_value
