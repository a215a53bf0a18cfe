"""Nemotron-H's mixers in numpy (`nemotron_h`), written from transformers 5.24's `models/nemotron_h`.

- attention (`NemotronHAttention`): grouped-query attention without positional encoding (no RoPE, no
  biases, no q/k norm), softmax scaled by `head_dim ** -0.5`;
- Mamba2 (`NemotronHMamba2Mixer.torch_forward`, its cached one-token path `mamba2_selective_state_update`
  and its chunked prefill `mamba2_chunk_scan`, here token by token as the recurrence they compute):
  in_proj to [z | xBC | dt], the causal conv with its bias and SiLU, B and C per group shared by the
  group's H/G consecutive heads (`repeat_interleave`), `dt = softplus(dt + dt_bias)` unclamped (transformers
  clamps at `time_step_min` in its prefill only; the decision is docs/families/nemotron_h.md's),
  `S <- exp(dt A) S + B (dt x)^T`, `y = C S + D x`, then `NemotronHRMSNormGated`: the gate first
  (`norm_before_gate=False`), an RMS norm over each of the G groups of H*P/G channels, the weight;
  `out_proj`;
- the MoE block's experts (`NemotronHMoE`, `relu2_moe`, which `moe.sparse_moe` calls after routing): non-gated
  relu² experts, between `fc1_latent_proj` and `fc2_latent_proj` with LatentMoE, and a relu² shared expert.

The recurrent state is kept `[B, H, N, P]` (state by head dim), LinearAttention's `(B, H_kv, d_k, d_v)`
with k = B and v = dt x (transformers keeps its transpose); the conv state `[B, conv_dim, K-1]`.
Shares no code with the graph builder.
"""

from __future__ import annotations

import numpy as np

from ..ir import Architecture, MoeDims
from .primitives import causal_attention


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def attention(w, arch: Architecture, prefix: str, x: np.ndarray, positions: np.ndarray,
              past: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """x `[B, S, H]` (already input-normed); `positions` unused (no positional encoding)."""
    b, s, _ = x.shape
    nh, kvh, hd = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    p = prefix + "self_attn."
    q = w.linear(x, p + "q_proj.weight").reshape(b, s, nh, hd)
    k = w.linear(x, p + "k_proj.weight").reshape(b, s, kvh, hd)
    v = w.linear(x, p + "v_proj.weight").reshape(b, s, kvh, hd)
    out, kv = causal_attention(q, k, v, past, nh // kvh)
    return w.linear(out, p + "o_proj.weight"), kv


def mamba2(w, arch: Architecture, prefix: str, x: np.ndarray, conv_state: np.ndarray, ssm_state: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x `[B, S, hidden]` (already input-normed) after the states -> (output, conv state, recurrent state)."""
    m = arch.mamba
    assert m is not None
    b, s, _ = x.shape
    heads, head_dim, state, groups = m.num_heads, m.head_dim, m.state_size, m.num_groups
    p = prefix + "mamba."
    projected = w.linear(x, p + "in_proj.weight")
    z = projected[..., : m.inner_size]
    xbc = projected[..., m.inner_size : m.inner_size + m.conv_dim].transpose(0, 2, 1)  # [B, conv_dim, S]
    dt = projected[..., m.inner_size + m.conv_dim :]  # [B, S, H]

    history = np.concatenate([conv_state, xbc], axis=2)
    weight = w[p + "conv1d.weight"][:, 0, :]  # [conv_dim, K]
    k = m.conv_kernel
    conv = np.stack([np.sum(history[:, :, t : t + k] * weight, axis=-1) for t in range(s)], axis=2)
    if m.conv_bias:
        conv = conv + w[p + "conv1d.bias"][None, :, None]
    xbc = _silu(conv).transpose(0, 2, 1)  # [B, S, conv_dim]
    new_conv_state = history[:, :, history.shape[2] - (k - 1) :]

    hs = xbc[..., : m.inner_size].reshape(b, s, heads, head_dim)
    bs = xbc[..., m.inner_size : m.inner_size + groups * state].reshape(b, s, groups, state)
    cs = xbc[..., m.inner_size + groups * state :].reshape(b, s, groups, state)
    y, ssm_state = selective_scan(hs, dt, w[p + "dt_bias"], w[p + "decay_scale"], bs, cs, w[p + "D"], ssm_state)
    gated = y.reshape(b, s, m.inner_size) * _silu(z)
    grouped = gated.reshape(b, s, groups, m.inner_size // groups)
    normed = grouped / np.sqrt(np.mean(grouped * grouped, axis=-1, keepdims=True) + arch.rms_norm_eps)
    out = normed.reshape(b, s, m.inner_size) * w[p + "norm.weight"]
    return w.linear(out, p + "out_proj.weight"), new_conv_state, ssm_state


def selective_scan(hs: np.ndarray, dt: np.ndarray, dt_bias: np.ndarray, a: np.ndarray, bs: np.ndarray, cs: np.ndarray,
                   d: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mamba2's scan, token by token: x `[B, S, H, P]`, dt `[B, S, H]` (before its bias), A = -exp(A_log) `[H]`,
    B / C `[B, S, G, N]`, D `[H]`, state `[B, H, N, P]` -> (y `[B, S, H, P]`, state). Group g serves heads
    g*H/G .. (g+1)*H/G - 1 (`repeat_interleave`); dt = softplus(dt + dt_bias), unclamped."""
    b, s, heads, head_dim = hs.shape
    group_of_head = np.arange(heads) // (heads // bs.shape[2])
    bs, cs = bs[:, :, group_of_head], cs[:, :, group_of_head]
    dt = np.logaddexp(0.0, dt + dt_bias)
    y = np.empty((b, s, heads, head_dim))
    for t in range(s):
        decay = np.exp(dt[:, t] * a)  # [B, H]
        state = state * decay[:, :, None, None] + bs[:, t, :, :, None] * (dt[:, t, :, None] * hs[:, t])[:, :, None, :]
        y[:, t] = np.einsum("bhnp,bhn->bhp", state, cs[:, t]) + d[None, :, None] * hs[:, t]
    return y, state


def _relu2(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0) ** 2


def relu2_moe(w, moe: MoeDims, p: str, tokens: np.ndarray, top: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Nemotron-H's MoE block (`NemotronHMoE`) after routing (`moe.route`'s `top` and `weights`): non-gated relu²
    experts, in the latent space with LatentMoE, and an ungated relu² shared expert on the layer's input."""
    inputs = tokens @ w[p + "fc1_latent_proj.weight"].T if moe.latent_size else tokens
    up, down = w[p + "experts.up_proj.weight"], w[p + "experts.down_proj.weight"]
    routed = np.zeros_like(inputs)
    for t in range(tokens.shape[0]):
        for e, weight in zip(top[t], weights[t]):
            routed[t] += weight * (down[e] @ _relu2(up[e] @ inputs[t]))
    if moe.latent_size:
        routed = routed @ w[p + "fc2_latent_proj.weight"].T
    s = p + "shared_expert."
    return routed + _relu2(tokens @ w[s + "up_proj.weight"].T) @ w[s + "down_proj.weight"].T
