"""GLM-4.5's attention in numpy (`glm4moe`), written from transformers' `Glm4MoeAttention`.

Grouped-query attention: q/k/v projections with optional biases, an optional per-head RMSNorm of q
and k (over the whole head, before the rotation), NeoX half-split RoPE on the first
`rotary_dim` channels at one position per token, softmax scaled by `head_dim ** -0.5`, no output
gate. The rest of GLM's layer (pre-norm residuals, the dense MLP or the sigmoid-routed MoE block)
is `forward.py`'s and `moe.py`'s. Shares no code with the graph builder.
"""

from __future__ import annotations

import numpy as np

from ..ir import Architecture
from .primitives import causal_attention, rms_norm, rope


def attention(w, arch: Architecture, prefix: str, x: np.ndarray, positions: np.ndarray,
              past: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """x `[B, S, H]` (already input-normed); returns (output, new (keys, values) `[B, KVH, T, HD]`)."""
    b, s, _ = x.shape
    nh, kvh, hd = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    p = prefix + "self_attn."

    def projected(name: str, heads: int) -> np.ndarray:
        y = w.linear(x, f"{p}{name}.weight")
        if arch.attention_bias:
            y = y + w[f"{p}{name}.bias"]
        return y.reshape(b, s, heads, hd)

    q, k, v = projected("q_proj", nh), projected("k_proj", kvh), projected("v_proj", kvh)
    if arch.qk_norm:
        q = rms_norm(q, w[p + "q_norm.weight"], arch.rms_norm_eps)
        k = rms_norm(k, w[p + "k_norm.weight"], arch.rms_norm_eps)
    rd, theta = arch.rope.rotary_dim, arch.rope.theta
    q, k = rope(q, positions, rd, theta), rope(k, positions, rd, theta)
    out, kv = causal_attention(q, k, v, past, nh // kvh)
    return w.linear(out, p + "o_proj.weight"), kv
