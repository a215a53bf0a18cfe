"""Numpy building blocks every family's reference forward uses: RMSNorm, NeoX RoPE, causal softmax attention."""

from __future__ import annotations

import numpy as np

from ..ir import YarnScaling
from .yarn import attention_factor, inverse_frequencies


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x: np.ndarray, positions: np.ndarray, rotary_dim: int, theta: float,
         yarn: YarnScaling | None = None, mrope_section: tuple[int, ...] = ()) -> np.ndarray:
    """NeoX half-split rotary embedding on the first `rotary_dim` channels (YaRN-scaled with `yarn`).

    x `[B, S, N, D]`, positions `[B, S]`, or `[3, B, S]` MRoPE rows (T, H, W) whose frequency slots are
    interleaved by `mrope_section` as transformers' Qwen3.5 text rotary recomposes them: slot j takes row H
    when j % 3 == 1 and j < 3 * section[1], row W when j % 3 == 2 and j < 3 * section[2], else row T.
    Text-only MRoPE has equal T/H/W positions, so it is the 1-D rotation with the same frequencies.
    """
    half = rotary_dim // 2
    inv_freq = inverse_frequencies(rotary_dim, theta, yarn)
    if positions.ndim == 3:
        rows = np.zeros(half, np.int64)
        for row in (1, 2):
            rows[row : 3 * mrope_section[row] : 3] = row
        angles = np.stack([positions[rows[j]].astype(np.float64) * inv_freq[j] for j in range(half)], axis=-1)
    else:
        angles = positions[..., None].astype(np.float64) * inv_freq  # [B, S, half]
    scale = attention_factor(yarn)
    cos, sin = scale * np.cos(angles)[:, :, None, :], scale * np.sin(angles)[:, :, None, :]
    x1, x2, rest = x[..., :half], x[..., half:rotary_dim], x[..., rotary_dim:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], axis=-1)


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, past: tuple[np.ndarray, np.ndarray] | None,
                     group: int, *, window: int | None = None, sinks: np.ndarray | None = None
                     ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Softmax attention of q `[B, S, NH, HD]` over past + new k `[B, S, KVH, HD]` (rotated) and v
    `[B, S, KVH, VD]`, causal among the new tokens, each KV head serving `group` query heads; (output
    `[B, S, NH*VD]`, new (keys, values)).

    `window`: a query sees only the last `window` tokens, its own included (`ir/attention.py`). `sinks`
    `[NH]`: one more logit per head in each softmax row, dropped after it (it weighs no value)."""
    b, s, nh, hd = q.shape
    q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))  # [B, N, S, D]
    if past is not None:
        k = np.concatenate([past[0], k], axis=2)
        v = np.concatenate([past[1], v], axis=2)
    total = k.shape[2]
    past_len = total - s
    k_per_q, v_per_q = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = q @ k_per_q.transpose(0, 1, 3, 2) / np.sqrt(hd)  # [B, NH, S, T]
    query_at = (past_len + np.arange(s))[:, None]
    visible = np.arange(total)[None, :] <= query_at
    if window is not None:
        visible &= np.arange(total)[None, :] > query_at - window
    scores = np.where(visible, scores, -np.inf)
    if sinks is not None:
        sink_column = np.broadcast_to(np.asarray(sinks, np.float64)[None, :, None, None], (b, nh, s, 1))
        scores = np.concatenate([scores, sink_column], axis=-1)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = (scores / scores.sum(axis=-1, keepdims=True))[..., :total]
    return (probs @ v_per_q).transpose(0, 2, 1, 3).reshape(b, s, nh * v.shape[-1]), (k, v)
