"""Multi-head latent attention in numpy (`deepseek2`), DECOMPRESSED, written from transformers' `Glm4MoeLiteAttention`
(the same as `DeepseekV3Attention`).

Per token: `q = q_b_proj(q_a_layernorm(q_a_proj(x)))` (or `q_proj(x)`) split per head into
`[q_nope | q_rope]`; `kv_a_proj_with_mqa(x)` into the latent `c` (then `kv_a_layernorm`) and one shared
`k_rope`; `kv_b_proj(c)` into per-head `[k_nope | v]`; keys `[k_nope | rope(k_rope)]` (k_rope repeated
over heads), queries `[q_nope | rope(q_rope)]`, softmax scaled by MLA's own scale, then `o_proj`.
The canonical rope channels are half-split (`ir/mla.py`), so the NeoX rotation applies to them.

This is the per-head form the graphs do NOT run (they run the absorbed one, `graphs/deepseek2.py`), so a
graph agreeing with it checks the absorption. It shares no code with the graphs.

The cache it keeps per layer is the latent, as the package's: keys = values = `[rope(k_rope) | c]`
`[B, 1, T, latent_dim]` (`DecoderState.kv`'s shape for an MLA `Architecture`); the per-head keys and
values are decompressed from it at each call, as transformers would hold them.
"""

from __future__ import annotations

import numpy as np

from ..ir import Architecture
from .primitives import rms_norm, rope


def attention(w, arch: Architecture, prefix: str, x: np.ndarray, positions: np.ndarray,
              past: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """x `[B, S, H]` (already input-normed); returns (output, new latent cache (keys, values) `[B, 1, T, latent_dim]`)."""
    mla = arch.mla
    assert mla is not None
    b, s, _ = x.shape
    nh, nope, rd, r, vd = (arch.num_attention_heads, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.kv_lora_rank,
                           mla.v_head_dim)
    p = prefix + "self_attn."
    eps = mla.latent_norm_eps
    theta, yarn = arch.rope.theta, arch.rope.yarn  # yarn: DeepSeek-V3's scaled frequencies and cos/sin factor

    if mla.q_lora_rank is None:
        q = w.linear(x, p + "q_proj.weight")
    else:
        q = w.linear(rms_norm(w.linear(x, p + "q_a_proj.weight"), w[p + "q_a_layernorm.weight"], eps),
                     p + "q_b_proj.weight")
    q = q.reshape(b, s, nh, nope + rd)
    q_nope, q_rot = q[..., :nope], rope(q[..., nope:], positions, rd, theta, yarn)

    compressed = w.linear(x, p + "kv_a_proj_with_mqa.weight")
    c = rms_norm(compressed[..., :r], w[p + "kv_a_layernorm.weight"], eps)  # [B, S, r]
    k_rot = rope(compressed[..., None, r:], positions, rd, theta, yarn)[:, :, 0, :]  # [B, S, rd], one head for all
    latent = np.concatenate([k_rot, c], axis=-1)[:, None]  # [B, 1, S, rd + r]
    if past is not None:
        latent = np.concatenate([past[0], latent], axis=2)
    total = latent.shape[2]

    # Decompress every cached token, per head: kv_b_proj(c) = [k_nope | v].
    all_rot, all_c = latent[:, 0, :, :rd], latent[:, 0, :, rd:]
    kv = w.linear(all_c, p + "kv_b_proj.weight").reshape(b, total, nh, nope + vd)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    keys = np.concatenate([k_nope, np.broadcast_to(all_rot[:, :, None, :], (b, total, nh, rd))], axis=-1)
    queries = np.concatenate([q_nope, q_rot], axis=-1)

    scores = np.einsum("bshd,bthd->bhst", queries, keys) * mla.softmax_scale
    past_len = total - s
    visible = np.arange(total)[None, :] <= (past_len + np.arange(s))[:, None]
    scores = np.where(visible, scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    out = np.einsum("bhst,bthd->bshd", probs, v).reshape(b, s, nh * vd)
    return w.linear(out, p + "o_proj.weight"), (latent, latent)
