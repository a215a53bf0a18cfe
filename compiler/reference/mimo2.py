"""MiMo-V2-Flash's attention in numpy (`mimo2`), written from transformers' `MiMoV2FlashAttention`.

q/k/v projections (no bias, no q/k norm), values times `attention_value_scale`, NeoX RoPE on the layer kind's share
of the q/k head at its theta, grouped-query softmax attention scaled by `head_dim ** -0.5` over value heads of their
own width (a sliding layer within its window, with a sink logit per query head appended to each softmax and
dropped), then `o_proj`. A sliding layer is told its own geometry (`layer`); the rest of the layer is
`forward.py`'s and `moe.py`'s. Shares no code with the graph builder.
"""

from __future__ import annotations

import numpy as np

from ..ir import Architecture, LayerAttention, LayerKind
from .primitives import causal_attention, rope


def attention(w, arch: Architecture, prefix: str, x: np.ndarray, positions: np.ndarray,
              past: tuple[np.ndarray, np.ndarray] | None, layer: LayerAttention | None = None
              ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """x `[B, S, H]` (already input-normed); returns (output, new (keys, values))."""
    layer = layer or arch.layer_attention(LayerKind.FULL_ATTENTION)
    b, s, _ = x.shape
    nh, kvh, hd, vd = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim, layer.value_head_dim
    p = prefix + "self_attn."
    q = w.linear(x, p + "q_proj.weight").reshape(b, s, nh, hd)
    k = w.linear(x, p + "k_proj.weight").reshape(b, s, kvh, hd)
    v = w.linear(x, p + "v_proj.weight").reshape(b, s, kvh, vd) * arch.attention_value_scale
    q, k = (rope(t, positions, layer.rope.rotary_dim, layer.rope.theta) for t in (q, k))
    sinks = w[p + "sinks"] if layer.sinks else None
    out, kv = causal_attention(q, k, v, past, nh // kvh, window=layer.window, sinks=sinks)
    return w.linear(out.reshape(b, s, nh * vd), p + "o_proj.weight"), kv
