"""Step-3.5 / 3.7-Flash's attention in numpy (`step35`), written from transformers' `Step3p7Attention`.

q/k/v projections (no bias), a per-head RMSNorm of q and k (the canonical weights hold the zero-centred 1 + w),
NeoX RoPE on the layer kind's share of the head at its theta, grouped-query softmax attention scaled by
`head_dim ** -0.5` (a sliding layer within its window), then each head's output times sigmoid(g_proj(x)) for
that head, and `o_proj`. A sliding layer is told its own geometry (`layer`: its heads, rope and window); the
rest of the layer (pre-norm residuals, the clamped SwiGLU MLP or experts) is `forward.py`'s and `moe.py`'s.
Shares no code with the graph builder.
"""

from __future__ import annotations

import numpy as np

from ..ir import Architecture, LayerAttention, LayerKind
from .primitives import causal_attention, rms_norm, rope


def attention(w, arch: Architecture, prefix: str, x: np.ndarray, positions: np.ndarray,
              past: tuple[np.ndarray, np.ndarray] | None, layer: LayerAttention | None = None
              ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """x `[B, S, H]` (already input-normed); returns (output, new (keys, values))."""
    layer = layer or arch.layer_attention(LayerKind.FULL_ATTENTION)
    b, s, _ = x.shape
    nh, kvh, hd, vd = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim, layer.value_head_dim
    p = prefix + "self_attn."
    q = rms_norm(w.linear(x, p + "q_proj.weight").reshape(b, s, nh, hd), w[p + "q_norm.weight"], arch.rms_norm_eps)
    k = rms_norm(w.linear(x, p + "k_proj.weight").reshape(b, s, kvh, hd), w[p + "k_norm.weight"], arch.rms_norm_eps)
    v = w.linear(x, p + "v_proj.weight").reshape(b, s, kvh, vd)
    q, k = (rope(t, positions, layer.rope.rotary_dim, layer.rope.theta) for t in (q, k))
    sinks = w[p + "sinks"] if layer.sinks else None
    out, kv = causal_attention(q, k, v, past, nh // kvh, window=layer.window, sinks=sinks)
    gate = 1.0 / (1.0 + np.exp(-w.linear(x, p + "g_proj.weight")))  # [B, S, nh]
    out = (out.reshape(b, s, nh, vd) * gate[..., None]).reshape(b, s, nh * vd)
    return w.linear(out, p + "o_proj.weight"), kv
