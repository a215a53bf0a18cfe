"""The Mamba2 mixer as a graph (`ir/mamba.py`), on the linear-attention ops Qwen3.5's Gated DeltaNet runs on.

The causal conv is CausalConvWithState with the conv's bias; the recurrence is LinearAttention with
`update_rule: "gated"`:

    S_t = exp(g_t) S_{t-1} + k_t v_t^T,   o_t = scale * q_t^T S_t

with q = C and k = B (`G` heads of `N`: value head h reads group h // (H / G), the op's grouped pairing,
which is Mamba2's `repeat_interleave`), v = dt * x (`H` heads of `P`), the per-head log decay g = dt * A
and scale 1: Mamba2's selective scan, and a state `[B, H, N, P]` in the op's (and the runtimes') layout.
D's skip term and the gated group norm follow the op. Because the ops and the state are those of a Gated
DeltaNet layer, the sequence layouts (`sequence.py`, `state_window.py`, `paged.py`: GatedDeltaNet with the
same rule) serve unchanged: a long prompt is one call of the op (no per-token loop in the graph), and the
windowed state lets onnxruntime-genai crop a rejected draft.

`dt = softplus(dt + dt_bias)` and the decay are float32 whatever the I/O dtype, as Gated DeltaNet's gates
are: exp(g) amplifies rounding. dt is not clamped (the decision: docs/families/nemotron_h.md).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import Architecture, Mamba2Dims
from .blocks import SequenceOps, cast, initializer_name, merge_heads, project, silu, split_heads
from .builder import GraphBuilder
from .recurrence import Recurrence

F32 = oir.DataType.FLOAT


def mamba2_rule(arch: Architecture) -> Recurrence:
    m = arch.mamba
    assert m is not None
    return Recurrence("gated", m.num_groups, m.state_size, m.num_heads, m.head_dim, 1.0)


def mamba2(b: GraphBuilder, ops: SequenceOps, x: oir.Value, prefix: str, arch: Architecture,
           past_conv: oir.Value, past_recurrent: oir.Value) -> tuple[oir.Value, oir.Value, oir.Value]:
    """Layer `prefix`'s Mamba2 mixer on `x` (input-normed) -> (output, present conv state, present recurrent state)."""
    m = arch.mamba
    assert m is not None
    p = prefix + "mamba."

    def tensor(name: str, dtype=None) -> oir.Value:
        (value,) = b.weights(b.params.tensor(p + name, initializer_name(p + name), dtype=dtype))
        return value

    groups_width = m.num_groups * m.state_size
    with b.scope("mamba"):
        projected = project(b, x, p + "in_proj.weight", "in_proj/MatMul")
        z, xbc, dt = b.op_multi("Split", [projected, b.i64(f"split_{m.inner_size}_{m.conv_dim}_{m.num_heads}",
                                                           [m.inner_size, m.conv_dim, m.num_heads])],
                                {"axis": -1}, name="in_proj/Split", num_outputs=3)
        bias = tensor("conv1d.bias") if m.conv_bias else None
        xbc, present_conv = ops.causal_conv(b, xbc, tensor("conv1d.weight"), past_conv, bias)
        xs, bs, cs = b.op_multi("Split", [xbc, b.i64(f"split_{m.inner_size}_{groups_width}_{groups_width}",
                                                      [m.inner_size, groups_width, groups_width])],
                                {"axis": -1}, name="xBC/Split", num_outputs=3)
        dt = b.op("Softplus", [b.op("Add", [cast(b, dt, F32, "dt/Cast", b.io_dtype), tensor("dt_bias", F32)],
                                    name="dt/Add")], name="dt/Softplus")  # [.., H] float32
        decay = b.op("Mul", [dt, tensor("decay_scale", F32)], name="decay/Mul")  # dt * A, the log decay
        heads = split_heads(b, ops, xs, m.num_heads, m.head_dim, "x/Reshape")  # [.., H, P]
        dt_per_head = b.op("Unsqueeze", [cast(b, dt, b.io_dtype, "dt/Cast_io", F32), b.i64("axis_last", [-1])],
                           name="dt/Unsqueeze")
        v = merge_heads(b, ops, b.op("Mul", [heads, dt_per_head], name="v/Mul"), m.inner_size, "v/merge")
        q, k = query_key_heads(b, ops, bs, cs, m)
        y, present_recurrent = ops.recurrence(b, q, k, v, decay, None, past_recurrent, mamba2_rule(arch))
        d = b.op("Unsqueeze", [tensor("D"), b.i64("axis_last", [-1])], name="D/Unsqueeze")  # [H, 1]
        y = b.op("Add", [y, b.op("Mul", [heads, d], name="D/Mul")], name="D/Add")
        y = merge_heads(b, ops, y, m.inner_size, "y/Reshape")
        normed = gated_group_norm(b, ops, y, z, tensor("norm.weight"), m, arch.rms_norm_eps)
        out = project(b, normed, p + "out_proj.weight", "out_proj/MatMul")
    return out, present_conv, present_recurrent


def query_key_heads(b: GraphBuilder, ops: SequenceOps, bs: oir.Value, cs: oir.Value, m: Mamba2Dims
                    ) -> tuple[oir.Value, oir.Value]:
    """C and B `[.., G * N]` as the op's query and key heads: G of them, value head h reading group h // (H / G)
    (the op's grouped pairing), which is how transformers' `repeat_interleave` shares them."""
    return (split_heads(b, ops, cs, m.num_groups, m.state_size, "C/Reshape"),
            split_heads(b, ops, bs, m.num_groups, m.state_size, "B/Reshape"))


def gated_group_norm(b: GraphBuilder, ops: SequenceOps, y: oir.Value, z: oir.Value, weight: oir.Value, m: Mamba2Dims,
                     eps: float) -> oir.Value:
    """`NemotronHRMSNormGated` with `norm_before_gate=False`: `y * silu(z)` first, then an RMS norm over each of the G
    groups of H * P / G channels (unit scale: RMSNormalization's scale spans one group), then the weight."""
    gated = b.op("Mul", [y, silu(b, z, "z/silu")], name="gate/Mul")
    group_width = m.inner_size // m.num_groups
    grouped = split_heads(b, ops, gated, m.num_groups, group_width, "norm/groups")
    ones = b.constant(f"ones_{group_width}_{b.io_dtype.name.lower()}", np.ones(group_width, b.io_dtype.numpy()))
    normed = b.op("RMSNormalization", [grouped, ones], {"epsilon": eps, "axis": -1, "stash_type": 1},
                  name="norm/RMSNormalization")
    return b.op("Mul", [merge_heads(b, ops, normed, m.inner_size, "norm/merge"), weight], name="norm/Mul")
