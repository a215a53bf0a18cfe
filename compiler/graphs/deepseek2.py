"""The `deepseek2` family's decoder blocks (DeepSeek-V2/V3, GLM-4.7-Flash): multi-head latent attention, absorbed.

transformers' `DeepseekV3Attention` / `Glm4MoeLiteAttention` decompress a per-token latent into per-head
keys and values (`ir/mla.py`). The graph runs the *absorbed* form instead (llama.cpp's), so the runtime
caches only the latent, one KV head `latent_dim` wide, in the K and the V cache alike:

    q                  = q_b_proj(rms_norm(q_a_proj(x), latent_norm_eps))      # or q_proj(x)
    q_nope, q_rope     = per head [qk_nope_head_dim | qk_rope_head_dim]
    q_lat_h            = q_nope_h @ W_UK_h            # W_UK_h: head h's k_nope rows of kv_b_proj, [nope, r]
    query_h            = [rope(q_rope_h) | q_lat_h]   # latent_dim wide
    c, k_rope          = kv_a_proj_with_mqa(x) split [kv_lora_rank | qk_rope_head_dim]
    key = value        = [rope(k_rope) | rms_norm(c, latent_norm_eps)]   # ONE head, latent_dim wide
    o_h                = attention(query, key, value) head h, its last kv_lora_rank channels @ W_UV_h^T
    out                = o_proj([o_0 | ... | o_{nh-1}])

`query_h . key` is `q_rope . k_rope + q_nope . (W_UK_h c)`, transformers' score; `o_h`'s latent part is
`sum_t p_t c_t`, and `W_UV_h` (head h's v rows) maps it to `sum_t p_t v_t`. The softmax scale is
MLA's own (`Architecture.softmax_scale`), not the cached width's. `attention(query, key, value)` is
GroupQueryAttention (num_heads nh, kv_num_heads 1) or, where `FusedKernels.mla_group_query_attention` is off
(dense CPU graphs: measured faster), the same function in plain ops with the heads folded into GEMM rows
(`latent_attention.py`); paged graphs run PagedAttention. The rope channels arrive in half-split
order (the canonical form), so the shared NeoX rotation serves, one position row per token.

kv_b_proj is never a MatMul operand here: its two halves are stored as batched per-head constants,
`W_UK [nh, nope, r]` and `W_UV [nh, r, v]`, always float (`passes/quantization.role_of` gives it the
tensor role; a block-quantized source's is dequantized on write).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import Architecture, MlaDims, ModelIR
from ..profiles.kernels import NO_FUSION, FusedKernels
from .blocks import (Rotary, SequenceOps, initializer_name, merge_heads, project, project_all, rms_norm, rotate_heads,
                     split_heads)
from .builder import BuiltGraph, GraphBuilder, GraphData
from .decoder import Progress, attention_only, build_decoder
from .initializers import InitializerGroup, PlannedTensor
from .parameters import ParameterSource

# The stems of kv_b_proj's absorbed halves, beside its canonical initializer name.
UK_SUFFIX, UV_SUFFIX = ".absorbed_k", ".absorbed_v"


def absorbed_names(canonical: str) -> tuple[str, str]:
    """Initializer names of kv_b_proj's per-head halves `W_UK [nh, nope, r]` and `W_UV [nh, r, v]`."""
    stem = initializer_name(canonical).removesuffix(".weight")
    return stem + UK_SUFFIX, stem + UV_SUFFIX


def split_kv_b(w: np.ndarray, heads: int, mla: MlaDims) -> tuple[np.ndarray, np.ndarray]:
    """kv_b_proj `[nh * (nope + v), r]` (per head: k_nope rows, then v rows) -> (W_UK `[nh, nope, r]`, W_UV `[nh, r, v]`)."""
    per_head = np.asarray(w).reshape(heads, mla.qk_nope_head_dim + mla.v_head_dim, mla.kv_lora_rank)
    uk = per_head[:, : mla.qk_nope_head_dim, :]
    uv = per_head[:, mla.qk_nope_head_dim :, :].transpose(0, 2, 1)
    return uk, uv


def _absorbed(b: GraphBuilder, canonical: str, heads: int, mla: MlaDims) -> tuple[oir.Value, oir.Value]:
    params = b.params
    dtype = params.io_dtype
    uk_name, uv_name = absorbed_names(canonical)
    planned = (PlannedTensor(uk_name, dtype, (heads, mla.qk_nope_head_dim, mla.kv_lora_rank)),
               PlannedTensor(uv_name, dtype, (heads, mla.kv_lora_rank, mla.v_head_dim)))

    def produce() -> tuple[np.ndarray, ...]:
        uk, uv = split_kv_b(params.store.read_float(canonical), heads, mla)
        return (np.ascontiguousarray(uk, dtype=dtype.numpy()), np.ascontiguousarray(uv, dtype=dtype.numpy()))

    uk, uv = b.weights(InitializerGroup(planned, produce, written=lambda: params.release(canonical)))
    return uk, uv


def _per_head_matmul(b: GraphBuilder, ops: SequenceOps, x: oir.Value, weight: oir.Value, heads: int, width: int,
                     name: str) -> oir.Value:
    """`x [.., nh, k]` times head h's `weight[h] [k, width]` -> `[.., nh, width]` (one batched MatMul)."""
    rows = b.op("Unsqueeze", [x, b.i64("axis_minus_2", [-2])], name=f"{name}/Unsqueeze")  # [.., nh, 1, k]
    y = b.op("MatMul", [rows, weight], name=f"{name}/MatMul")  # broadcast over the token axes: [.., nh, 1, width]
    return split_heads(b, ops, y, heads, width, f"{name}/Reshape")


def attention(b: GraphBuilder, ops: SequenceOps, x: oir.Value, prefix: str, arch: Architecture, rot: Rotary,
              past_key: oir.Value, past_value: oir.Value) -> tuple[oir.Value, oir.Value, oir.Value]:
    mla = arch.mla
    if mla is None:
        raise AssertionError(f"{arch.family}: the MLA block needs Architecture.mla")
    nh, nope, rd, r = arch.num_attention_heads, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.kv_lora_rank
    if rot.rotary_dim != rd:
        raise AssertionError(f"MLA rotates all {rd} rope channels; the rotary tables have {rot.rotary_dim}")
    p = prefix + "self_attn."
    eps = mla.latent_norm_eps
    with b.scope("self_attn"):
        # Both projections of x, one MatMul where the profile packs projections stored alike.
        q_in = p + ("q_proj.weight" if mla.q_lora_rank is None else "q_a_proj.weight")
        q, kv = project_all(b, x, [q_in, p + "kv_a_proj_with_mqa.weight"])
        if mla.q_lora_rank is not None:
            q = rms_norm(b, q, p + "q_a_layernorm.weight", eps, "q_a_layernorm")
            q = project(b, q, p + "q_b_proj.weight", "q_b_proj/MatMul")
        q = split_heads(b, ops, q, nh, mla.qk_head_dim, "q_heads/Reshape")
        q_nope, q_rope = b.op_multi("Split", [q, b.i64(f"split_{nope}_{rd}", [nope, rd])], {"axis": -1},
                                    name="q_heads/Split", num_outputs=2)
        q_rope = split_heads(b, ops, rotate_heads(b, ops, q_rope, rot, nh, rd, "q_rope"), nh, rd, "q_rope/heads")
        uk, uv = _absorbed(b, p + "kv_b_proj.weight", nh, mla)
        q_lat = _per_head_matmul(b, ops, q_nope, uk, nh, r, "q_absorb")
        query = merge_heads(b, ops, b.op("Concat", [q_rope, q_lat], {"axis": -1}, name="query/Concat"),
                            nh * mla.latent_dim, "query/Reshape")

        c, k_rope = b.op_multi("Split", [kv, b.i64(f"split_{r}_{rd}", [r, rd])], {"axis": -1}, name="kv/Split",
                               num_outputs=2)
        c = rms_norm(b, c, p + "kv_a_layernorm.weight", eps, "kv_a_layernorm")
        k_rope = rotate_heads(b, ops, split_heads(b, ops, k_rope, 1, rd, "k_rope/heads"), rot, 1, rd, "k_rope")
        latent = b.op("Concat", [k_rope, c], {"axis": -1}, name="latent/Concat")  # [.., latent_dim]: K and V alike

        # Only dense ops have the plain-op form; paged ones run PagedAttention whatever the kernels say.
        if b.kernels.mla_group_query_attention or not hasattr(ops, "latent_attention"):
            out, present_key, present_value = ops.attention(b, query, latent, latent, past_key, past_value, arch)
        else:  # dense graphs on a provider where the plain-op form decodes faster (profiles/kernels.py)
            out, present_key, present_value = ops.latent_attention(b, query, latent, past_key, past_value, arch)
        out = split_heads(b, ops, out, nh, mla.latent_dim, "out/Reshape")
        # Each head's result over the values is [sum p rope(k_rope) | sum p c]; only the latent half maps to v.
        o_lat = b.op("Slice", [out, b.i64(f"start_{rd}", [rd]), b.i64(f"end_{mla.latent_dim}", [mla.latent_dim]),
                               b.i64("axis_last", [-1])], name="out/Slice")
        o = _per_head_matmul(b, ops, o_lat, uv, nh, mla.v_head_dim, "v_absorb")
        out = project(b, merge_heads(b, ops, o, nh * mla.v_head_dim, "o/Reshape"), p + "o_proj.weight",
                      "o_proj/MatMul")
    return out, present_key, present_value


def build_main(ir: ModelIR, params: ParameterSource, data: GraphData, progress: Progress,
               kernels: FusedKernels = NO_FUSION) -> BuiltGraph:
    return build_decoder(ir, params, data, progress, kernels, attention_only(attention, "deepseek2"))
