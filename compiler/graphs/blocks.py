"""Qwen3.5 layer blocks shared by the main decoder and the MTP head, independent of the token layout.

Activations are `[B, S, X]` (dense) or `[N, X]` (packed); the ops whose form depends
on that layout (attention, causal conv, recurrence) come from a `SequenceOps`
(`sequence.py` dense, `paged.py` packed). Everything else here works on either.
Numerics follow `qwen35-mtp-architecture.md`: offset norms arrive with `1 + w`
folded in (canonical weights), RMS statistics in float32, NeoX half-split rotary
on the first `rotary_dim` channels, gated attention, GatedDeltaNet with grouped
value heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import onnx_ir as oir

from ..ir.contracts import EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER
from ..ir import Architecture, Rope
from .builder import MS, GraphBuilder
from .parameters import EmbeddingParams, LinearParams
from .rope_frequencies import inverse_frequencies, yarn_scaled

# The GatedDeltaNet L2 normalisation of q and k: x / sqrt(sum(x^2) + eps), as the HF reference does.
L2_NORM_EPS = 1e-6


def initializer_name(canonical: str) -> str:
    """Graph initializer name of a canonical weight (main-model tensors under `model.`, head tensors as is)."""
    if canonical == "embed_tokens.weight":
        return EMBEDDING_INITIALIZER
    if canonical.startswith("mtp."):
        return canonical
    return "model." + canonical


def linear_stem(canonical: str) -> str:
    """Initializer stem of a projection: `<stem>.weight`, float or packed; `contracts.quantized_names` names the rest."""
    if canonical == "lm_head.weight":
        return LM_HEAD_INITIALIZER.removesuffix(".weight")
    return initializer_name(canonical).removesuffix(".weight") + ".MatMul"


class SequenceOps(Protocol):
    """The layout-dependent ops. `lead` is the number of token axes (2 for [B,S], 1 for [N])."""

    lead: int

    def attention(self, b: GraphBuilder, q: oir.Value, k: oir.Value, v: oir.Value, past_key: oir.Value,
                  past_value: oir.Value, arch: Architecture) -> tuple[oir.Value, oir.Value, oir.Value]:
        """q `[.., NH*HD]`, k/v `[.., KVH*HD]`, already normed and rotated -> (out, present_key, present_value)."""
        ...

    def causal_conv(self, b: GraphBuilder, x: oir.Value, weight: oir.Value, past: oir.Value
                    ) -> tuple[oir.Value, oir.Value]:
        """Depthwise causal conv with SiLU over `[.., C]` -> (y `[.., C]`, present state)."""
        ...

    def recurrence(self, b: GraphBuilder, q: oir.Value, k: oir.Value, v: oir.Value, decay: oir.Value,
                   beta: oir.Value, past: oir.Value, arch: Architecture) -> tuple[oir.Value, oir.Value]:
        """Gated delta rule. q/k `[.., Hk, Dk]` (L2-normed), v `[.., Hv * Dv]`, decay/beta float32 `[.., Hv]`
        -> (output `[.., Hv, Dv]`, present state)."""
        ...

    def take_state_updates(self) -> tuple[oir.Value | None, oir.Value | None]:
        """(conv values, recurrent capsule) captured by the last causal_conv / recurrence, or Nones."""
        ...


@dataclass(frozen=True)
class Rotary:
    cos: oir.Value  # [.., 1, rotary_dim / 2] broadcasting over heads; [B, S, rotary_dim / 2] when `fused`
    sin: oir.Value
    rotary_dim: int
    fused: bool = False  # applied by RotaryEmbedding-23 (see profiles/kernels.py)


@dataclass(frozen=True)
class Residual:
    """The residual stream, `base + branch`: a branch output not yet added is left to the next norm,
    which adds and normalises in one SkipSimplifiedLayerNormalization where the profile has it."""

    base: oir.Value
    branch: oir.Value | None = None


# ---------------------------------------------------------------------------- primitives


def cast(b: GraphBuilder, x: oir.Value, to: oir.DataType, name: str, source: oir.DataType) -> oir.Value:
    return x if to == source else b.op("Cast", [x], {"to": to}, name=name)


def rms_norm(b: GraphBuilder, x: oir.Value, canonical: str, eps: float, name: str) -> oir.Value:
    (w,) = b.weights(b.params.tensor(canonical, initializer_name(canonical)))
    return b.op("RMSNormalization", [x, w], {"epsilon": eps, "axis": -1, "stash_type": 1}, name=name)


def add_norm(b: GraphBuilder, stream: Residual, canonical: str, eps: float, name: str
             ) -> tuple[oir.Value, Residual]:
    """`rms_norm(base + branch)`, and the stream with the branch added in."""
    if stream.branch is None:
        return rms_norm(b, stream.base, canonical, eps, name), stream
    if not b.kernels.skip_norm:
        total = b.op("Add", [stream.base, stream.branch], name=f"{name}/Add")
        return rms_norm(b, total, canonical, eps, name), Residual(total)
    (w,) = b.weights(b.params.tensor(canonical, initializer_name(canonical)))
    normed, _mean, _inv_std, total = b.op_multi(
        "SkipSimplifiedLayerNormalization", [stream.branch, stream.base, w], {"epsilon": eps}, name=name,
        num_outputs=4, domain=MS)
    return normed, Residual(total)


def linear(b: GraphBuilder, x: oir.Value, p: LinearParams, name: str) -> oir.Value:
    values = b.weights(p.group)
    if p.quant is None:
        return b.op("MatMul", [x, values[0]], name=name)
    attrs = {"K": p.k, "N": p.n, "bits": p.quant.bits, "block_size": p.quant.block_size,
             "accuracy_level": p.accuracy_level}
    if not p.quant.block_offsets:
        return b.op("MatMulNBits", [x, *values], attrs, name=name, domain=MS)
    *op_inputs, offsets = values
    y = b.op("MatMulNBits", [x, *op_inputs], attrs, name=name, domain=MS)
    # w = w_op + o[block]: x @ w^T gains, per output n, sum over blocks of (x's block sum) * o[n, block].
    sums = _block_view(b, x, p.k // p.quant.block_size, p.quant.block_size, f"{name}/offsets")
    sums = b.op("ReduceSum", [sums, b.i64("axis_last", [-1])], {"keepdims": 0}, name=f"{name}/offsets/ReduceSum")
    term = b.op("MatMul", [sums, offsets], name=f"{name}/offsets/MatMul")
    return b.op("Add", [y, term], name=f"{name}/offsets/Add")


def _block_view(b: GraphBuilder, x: oir.Value, k_blocks: int, block_size: int, name: str) -> oir.Value:
    """`x [..., k_blocks * block_size]` as `[..., k_blocks, block_size]`, whatever its rank."""
    shape = b.op("Shape", [x], name=f"{name}/Shape")
    lead = b.op("Slice", [shape, b.i64("zero_1d", [0]), b.i64("minus_one_1d", [-1])], name=f"{name}/Slice")
    blocked = b.op("Concat", [lead, b.i64(f"blocks_{k_blocks}x{block_size}", [k_blocks, block_size])],
                   {"axis": 0}, name=f"{name}/Concat")
    return b.op("Reshape", [x, blocked], name=f"{name}/Reshape")


def project(b: GraphBuilder, x: oir.Value, canonical: str, name: str) -> oir.Value:
    return linear(b, x, b.params.linear(canonical, linear_stem(canonical)), name)


def project_all(b: GraphBuilder, x: oir.Value, canonicals: Sequence[str]) -> list[oir.Value]:
    """`x` through each projection (`<local>/MatMul`); with packed projections, those stored alike
    as one MatMul over their weights side by side (`<packed>/MatMul`), then a Split."""
    params = [b.params.linear(c, linear_stem(c)) for c in canonicals]
    if not b.kernels.packed_projections:
        return [linear(b, x, p, f"{_local(c)}/MatMul") for c, p in zip(canonicals, params)]
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault((p.quant, p.accuracy_level, p.k), []).append(i)
    out: list[oir.Value | None] = [None] * len(canonicals)
    for members in groups.values():
        if len(members) == 1:
            (i,) = members
            out[i] = linear(b, x, params[i], f"{_local(canonicals[i])}/MatMul")
            continue
        local = _packed_local([_local(canonicals[i]) for i in members])
        canonical = canonicals[members[0]].rsplit(".", 2)[0] + f".{local}.weight"
        packed = b.params.packed_linear([params[i] for i in members], linear_stem(canonical))
        y = linear(b, x, packed, f"{local}/MatMul")
        sizes = [params[i].n for i in members]
        parts = b.op_multi("Split", [y, b.i64(f"split_{'_'.join(map(str, sizes))}", sizes)], {"axis": -1},
                           name=f"{local}/Split", num_outputs=len(members))
        for i, part in zip(members, parts):
            out[i] = part
    return out  # type: ignore[return-value]


def _local(canonical: str) -> str:
    """`layers.0.mlp.up_proj.weight` -> `up_proj`."""
    return canonical.removesuffix(".weight").rsplit(".", 1)[-1]


def _packed_local(locals_: list[str]) -> str:
    """`q_proj k_proj v_proj` -> `q_k_v_proj`; `in_proj_qkv in_proj_z` -> `in_proj_qkv_z`."""
    if all(n.startswith("in_proj_") for n in locals_):
        return "in_proj_" + "_".join(n.removeprefix("in_proj_") for n in locals_)
    return "_".join(n.removesuffix("_proj") for n in locals_) + "_proj"


def silu(b: GraphBuilder, x: oir.Value, name: str) -> oir.Value:
    if b.kernels.silu:
        return b.op("QuickGelu", [x], {"alpha": 1.0}, name=f"{name}/QuickGelu", domain=MS)
    return b.op("Mul", [x, b.op("Sigmoid", [x], name=f"{name}/Sigmoid")], name=f"{name}/Mul")


def split_heads(b: GraphBuilder, ops: SequenceOps, x: oir.Value, heads: int, dim: int, name: str) -> oir.Value:
    return b.op("Reshape", [x, b.i64(f"shape_{heads}x{dim}", [0] * ops.lead + [heads, dim])], name=name)


def merge_heads(b: GraphBuilder, ops: SequenceOps, x: oir.Value, width: int, name: str) -> oir.Value:
    return b.op("Reshape", [x, b.i64(f"shape_{width}", [0] * ops.lead + [width])], name=name)


def embed(b: GraphBuilder, ids: oir.Value, p: EmbeddingParams) -> oir.Value:
    values = b.weights(p.group)
    if p.quant is None:
        return b.op("Gather", [values[0], ids], {"axis": 0}, name="embed_tokens/Gather")
    attrs = {"bits": p.quant.bits, "block_size": p.quant.block_size, "gather_axis": 0, "quantize_axis": 1}
    if not p.quant.block_offsets:
        return b.op("GatherBlockQuantized", [values[0], ids, *values[1:]], attrs, name="embed_tokens/Gather",
                    domain=MS)
    *op_inputs, offsets = values
    rows = b.op("GatherBlockQuantized", [op_inputs[0], ids, *op_inputs[1:]], attrs, name="embed_tokens/Gather",
                domain=MS)
    # Each row's blocks gain that token's per-block offset.
    k_blocks = p.hidden // p.quant.block_size
    blocked = _block_view(b, rows, k_blocks, p.quant.block_size, "embed_tokens/offsets")
    row_offsets = b.op("Gather", [offsets, ids], {"axis": 0}, name="embed_tokens/offsets/Gather")
    row_offsets = b.op("Unsqueeze", [row_offsets, b.i64("axis_last", [-1])], name="embed_tokens/offsets/Unsqueeze")
    shifted = b.op("Add", [blocked, row_offsets], name="embed_tokens/offsets/Add")
    return b.op("Reshape", [shifted, b.op("Shape", [rows], name="embed_tokens/offsets/RowShape")],
                name="embed_tokens/offsets/Unblock")


def lm_head(b: GraphBuilder, x: oir.Value) -> oir.Value:
    with b.scope("lm_head"):
        return project(b, x, "lm_head.weight", "MatMul")


# ---------------------------------------------------------------------------- rotary


def mrope_axes(rope: Rope) -> np.ndarray:
    """Which position row (0 = T, 1 = H, 2 = W) drives each of the rotary_dim / 2 frequency slots."""
    half = rope.rotary_dim // 2
    axes = np.zeros(half, np.int64)
    sections = rope.mrope_section
    if not sections:
        return axes
    if rope.mrope_interleaved:
        # Interleaved layout: slots cycle T, H, W; H and W stop after their section's share.
        for axis in (1, 2):
            axes[axis : 3 * sections[axis] : 3] = axis
    else:
        start = 0
        for axis, length in enumerate(sections):
            axes[start : start + length] = axis
            start += length
    return axes


def rotary(b: GraphBuilder, rope: Rope, positions: oir.Value, position_rows: bool, scope: str = "rotary") -> Rotary:
    """cos/sin per token from int64 positions: `[3, ..tokens]` rows (MRoPE) or `[..tokens]` (one row); a second
    table in one graph (a layer kind with a rope of its own) gets a `scope` of its own."""
    rd = rope.rotary_dim
    inv_freq = inverse_frequencies(rope)
    with b.scope(scope):
        if position_rows:
            rank = len(positions.shape)
            rows_last = b.op("Transpose", [positions], {"perm": [*range(1, rank), 0]}, name="Transpose")
            slot_positions = b.op("Gather", [rows_last, b.constant("slot_axes", mrope_axes(rope))], {"axis": -1},
                                  name="Gather")
        else:
            slot_positions = b.op("Unsqueeze", [positions, b.i64("last_axis", [-1])], name="Unsqueeze")
        pos = b.op("Cast", [slot_positions], {"to": oir.DataType.FLOAT}, name="Cast")
        freqs = b.op("Mul", [pos, b.constant("inv_freq", inv_freq)], name="Mul")
        fused = b.kernels.rotary
        if not fused:
            freqs = b.op("Unsqueeze", [freqs, b.i64("head_axis", [-2])], name="Unsqueeze_heads")
        # Node by node as before yarn (Cos, its cast, then Sin's), so graphs of plain RoPE keep their bytes.
        cos = cast(b, yarn_scaled(b, b.op("Cos", [freqs], name="Cos"), rope, "Mul_cos"), b.io_dtype, "Cast_cos",
                   oir.DataType.FLOAT)
        sin = cast(b, yarn_scaled(b, b.op("Sin", [freqs], name="Sin"), rope, "Mul_sin"), b.io_dtype, "Cast_sin",
                   oir.DataType.FLOAT)
    return Rotary(cos, sin, rd, fused)


def rotate_heads(b: GraphBuilder, ops: SequenceOps, x: oir.Value, rot: Rotary, heads: int, head_dim: int,
                 name: str) -> oir.Value:
    """`x [.., heads, head_dim]` rotated, with its heads merged: `[.., heads * head_dim]`."""
    if not rot.fused:
        return merge_heads(b, ops, apply_rotary(b, x, rot, head_dim, f"{name}_rotary"), heads * head_dim,
                           f"{name}/Reshape")
    if ops.lead != 2:
        raise AssertionError("RotaryEmbedding-23 takes [B, S, X] activations; the profile fuses rotary for dense graphs only")
    merged = merge_heads(b, ops, x, heads * head_dim, f"{name}/Reshape")
    return b.op("RotaryEmbedding", [merged, rot.cos, rot.sin],
                {"num_heads": heads, "rotary_embedding_dim": rot.rotary_dim, "interleaved": 0},
                name=f"{name}_rotary/RotaryEmbedding")


def apply_rotary(b: GraphBuilder, x: oir.Value, rot: Rotary, head_dim: int, name: str) -> oir.Value:
    """NeoX half-split rotation of the first rotary_dim channels of `[.., heads, head_dim]`."""
    half = rot.rotary_dim // 2
    sizes = [half, half] + ([head_dim - rot.rotary_dim] if head_dim > rot.rotary_dim else [])
    with b.scope(name):
        parts = b.op_multi("Split", [x, b.i64(f"split_{'_'.join(map(str, sizes))}", sizes)], {"axis": -1},
                           name="Split", num_outputs=len(sizes))
        x1, x2 = parts[0], parts[1]
        r1 = b.op("Sub", [b.op("Mul", [x1, rot.cos], name="x1_cos"), b.op("Mul", [x2, rot.sin], name="x2_sin")],
                  name="r1")
        r2 = b.op("Add", [b.op("Mul", [x2, rot.cos], name="x2_cos"), b.op("Mul", [x1, rot.sin], name="x1_sin")],
                  name="r2")
        return b.op("Concat", [r1, r2, *parts[2:]], {"axis": -1}, name="Concat")


# ---------------------------------------------------------------------------- mixers


def gated_attention(b: GraphBuilder, ops: SequenceOps, x: oir.Value, prefix: str, arch: Architecture, rot: Rotary,
                    past_key: oir.Value, past_value: oir.Value) -> tuple[oir.Value, oir.Value, oir.Value]:
    nh, kvh, hd = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    eps = arch.rms_norm_eps
    p = prefix + "self_attn."
    with b.scope("self_attn"):
        q_gate, k, v = project_all(b, x, [p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"])
        # q_proj rows are per head [query_h | gate_h]
        q_gate = split_heads(b, ops, q_gate, nh, 2 * hd, "q_proj/Reshape")
        q, gate = b.op_multi("Split", [q_gate, b.i64("split_query_gate", [hd, hd])], {"axis": -1},
                             name="q_gate/Split", num_outputs=2)
        k = split_heads(b, ops, k, kvh, hd, "k_proj/Reshape")
        q = rotate_heads(b, ops, rms_norm(b, q, p + "q_norm.weight", eps, "q_norm"), rot, nh, hd, "q")
        k = rotate_heads(b, ops, rms_norm(b, k, p + "k_norm.weight", eps, "k_norm"), rot, kvh, hd, "k")
        out, present_key, present_value = ops.attention(b, q, k, v, past_key, past_value, arch)
        gate = b.op("Sigmoid", [merge_heads(b, ops, gate, nh * hd, "gate/Reshape")], name="gate/Sigmoid")
        out = b.op("Mul", [out, gate], name="gate/Mul")
        out = project(b, out, p + "o_proj.weight", "o_proj/MatMul")
    return out, present_key, present_value


def gated_delta_net(b: GraphBuilder, ops: SequenceOps, x: oir.Value, prefix: str, arch: Architecture,
                    past_conv: oir.Value, past_recurrent: oir.Value) -> tuple[oir.Value, oir.Value, oir.Value]:
    la = arch.linear_attention
    assert la is not None
    p = prefix + "linear_attn."
    f32 = oir.DataType.FLOAT
    with b.scope("linear_attn"):
        qkv, z, a, beta_logit = project_all(
            b, x, [p + "in_proj_qkv.weight", p + "in_proj_z.weight", p + "in_proj_a.weight", p + "in_proj_b.weight"])
        (conv_w,) = b.weights(b.params.tensor(p + "conv1d.weight", initializer_name(p + "conv1d.weight")))
        mixed, present_conv = ops.causal_conv(b, qkv, conv_w, past_conv)
        q, k, v = b.op_multi("Split", [mixed, b.i64("split_qkv", [la.key_dim, la.key_dim, la.value_dim])],
                             {"axis": -1}, name="qkv/Split", num_outputs=3)
        q = l2_normalize(b, split_heads(b, ops, q, la.num_key_heads, la.key_head_dim, "q/Reshape"), la.key_head_dim,
                         "q_l2norm")
        k = l2_normalize(b, split_heads(b, ops, k, la.num_key_heads, la.key_head_dim, "k/Reshape"), la.key_head_dim,
                         "k_l2norm")
        # decay = -exp(A_log) * softplus(a + dt_bias), in float32: exp(decay) amplifies rounding.
        a = cast(b, a, f32, "a/Cast", b.io_dtype)
        (dt_bias,) = b.weights(b.params.tensor(p + "dt_bias", initializer_name(p + "dt_bias"), dtype=f32))
        (decay_scale,) = b.weights(b.params.tensor(p + "decay_scale", initializer_name(p + "decay_scale"),
                                                   dtype=f32))
        beta_logit = cast(b, beta_logit, f32, "b/Cast", b.io_dtype)
        if b.kernels.linear_gate:
            decay, beta = b.op_multi("LinearAttentionGate", [a, dt_bias, decay_scale, beta_logit],
                                     name="gate/LinearAttentionGate", num_outputs=2, domain=MS)
        else:
            softplus = b.op("Softplus", [b.op("Add", [a, dt_bias], name="decay/Add")], name="decay/Softplus")
            decay = b.op("Mul", [softplus, decay_scale], name="decay/Mul")
            beta = b.op("Sigmoid", [beta_logit], name="beta/Sigmoid")
        o, present_recurrent = ops.recurrence(b, q, k, v, decay, beta, past_recurrent, arch)
        # Gated RMSNorm per value head (plain scale, not offset form) times silu(z).
        o = rms_norm(b, o, p + "norm.weight", arch.rms_norm_eps, "norm")
        z = split_heads(b, ops, z, la.num_value_heads, la.value_head_dim, "z/Reshape")
        o = b.op("Mul", [o, silu(b, z, "z/silu")], name="norm/gate")
        out = project(b, merge_heads(b, ops, o, la.value_dim, "o/Reshape"), p + "out_proj.weight",
                      "out_proj/MatMul")
    return out, present_conv, present_recurrent


def l2_normalize(b: GraphBuilder, x: oir.Value, dim: int, name: str) -> oir.Value:
    """`x / sqrt(sum(x^2) + eps)` over the last axis, of size `dim`."""
    if b.kernels.l2_norm and b.io_dtype == oir.DataType.FLOAT:
        # = RMSNorm(x, eps / dim) / sqrt(dim) (see profiles/kernels.py).
        scale = b.constant(f"l2_scale_{dim}", np.full(dim, dim**-0.5, np.float32))
        return b.op("RMSNormalization", [x, scale], {"epsilon": L2_NORM_EPS / dim, "axis": -1, "stash_type": 1},
                    name=f"{name}/RMSNormalization")
    with b.scope(name):
        sq = b.op("ReduceSumSquare", [x, b.i64("last_axis", [-1])], {"keepdims": 1}, name="ReduceSumSquare")
        eps = b.constant(f"eps_{b.io_dtype.name.lower()}", np.asarray(L2_NORM_EPS, b.io_dtype.numpy()))
        norm = b.op("Sqrt", [b.op("Add", [sq, eps], name="Add")], name="Sqrt")
        return b.op("Div", [x, norm], name="Div")


def residual_block(b: GraphBuilder, stream: Residual, prefix: str, eps: float, mixer, ffn) -> Residual:
    """Pre-norm double residual: x + mixer(norm(x)), then + ffn(norm(.)) (`moe.feed_forward`: the MLP or the MoE).
    The FFN's output is left pending on the stream, for the next norm to add (`add_norm`)."""
    h, stream = add_norm(b, stream, prefix + "input_layernorm.weight", eps, "input_layernorm")
    h, stream = add_norm(b, Residual(stream.base, mixer(h)), prefix + "post_attention_layernorm.weight", eps,
                         "post_attention_layernorm")
    return Residual(stream.base, ffn(b, h, prefix))
