"""numpy implementations of the packed-token ops, written from onnxruntime's contrib-op schemas.

Plain loops over sequences and tokens in float64, so they read like the contract and share nothing
with the ONNX lowerings they check.

- PagedAttention (com.microsoft): all sequences' new tokens packed along axis 0, delimited by
  `cumulative_sequence_length` `[B + 1]`; token j of sequence b sits at absolute position
  `past_seqlens[b] + j`, and its key/value is written to slot
  `block_table[b, p // block_size] * block_size + p % block_size` of the
  `[num_blocks, block_size, kv_heads, head_size]` caches before attention; each token attends
  (bottom-right aligned causal) over positions `0..p` of its own sequence, read back through the
  block table; query head h reads kv head `h // (num_heads / kv_num_heads)`.
- VarlenCausalConvWithState: depthwise causal convolution per sequence over token-major
  `[total_tokens, channels]`, the first taps reading the `[B, C, K-1]` carry state.
- GatedDeltaNet: the gated delta recurrence per sequence with a V-major `[B, Hv, Dv, Dk]` float
  state; value head j reads query/key head `j // (Hv / Hk)`.
"""

from __future__ import annotations

import numpy as np


def paged_attention(q, k, v, key_cache, value_cache, cu_seqlens, past_seqlens, block_table, *,
                    num_heads: int, kv_num_heads: int, scale: float | None = None, softcap: float = 0.0,
                    local_window_size: int = -1):
    """Returns (output `[N, num_heads * D]`, key_cache_out, value_cache_out), all float64."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    key_cache, value_cache = np.array(key_cache, np.float64), np.array(value_cache, np.float64)
    _, block_size, _, head_size = key_cache.shape
    group = num_heads // kv_num_heads
    scale = head_size**-0.5 if scale is None else scale

    def slot(b, position):
        return block_table[b, position // block_size], position % block_size

    for b in range(len(past_seqlens)):
        for j, t in enumerate(range(cu_seqlens[b], cu_seqlens[b + 1])):
            block, offset = slot(b, past_seqlens[b] + j)
            key_cache[block, offset] = k[t].reshape(kv_num_heads, head_size)
            value_cache[block, offset] = v[t].reshape(kv_num_heads, head_size)

    out = np.zeros((q.shape[0], num_heads * head_size))
    for b in range(len(past_seqlens)):
        for j, t in enumerate(range(cu_seqlens[b], cu_seqlens[b + 1])):
            position = past_seqlens[b] + j
            first = 0 if local_window_size < 0 else max(0, position - local_window_size + 1)
            keys = np.stack([key_cache[slot(b, p)] for p in range(first, position + 1)])  # [L, Hkv, D]
            values = np.stack([value_cache[slot(b, p)] for p in range(first, position + 1)])
            query = q[t].reshape(num_heads, head_size)
            for h in range(num_heads):
                scores = keys[:, h // group] @ query[h] * scale
                if softcap:
                    scores = softcap * np.tanh(scores / softcap)
                weights = np.exp(scores - scores.max())
                weights /= weights.sum()
                out[t, h * head_size : (h + 1) * head_size] = weights @ values[:, h // group]
    return out, key_cache, value_cache


def varlen_causal_conv(x, weight, cu_seqlens, initial_state, *, activation: str = "silu"):
    """x `[N, C]`, weight `[C, 1, K]`, state `[B, C, K-1]` -> (y `[N, C]`, final_state)."""
    x, weight = np.asarray(x, np.float64), np.asarray(weight, np.float64)
    state = np.array(initial_state, np.float64)
    kernel = weight.shape[-1]
    y = np.zeros_like(x)
    for b in range(state.shape[0]):
        window = state[b].T  # [K-1, C], oldest first
        for t in range(cu_seqlens[b], cu_seqlens[b + 1]):
            window = np.concatenate([window, x[t][None]])  # [K, C]
            y[t] = np.sum(window.T * weight[:, 0, :], axis=1)
            window = window[1:]
        state[b] = window.T
    if activation == "silu":
        y = y / (1.0 + np.exp(-y))
    return y, state


def gated_delta_net(q, k, v, cu_seqlens, decay, beta, initial_state, *, scale: float):
    """q, k `[N, Hk, Dk]`, v `[N, Hv, Dv]`, decay / beta `[N, Hv]` (log-space decay, effective rate),
    state `[B, Hv, Dv, Dk]` -> (output `[N, Hv, Dv]`, final_state)."""
    q, k, v, decay, beta = (np.asarray(t, np.float64) for t in (q, k, v, decay, beta))
    state = np.array(initial_state, np.float64)
    value_heads, key_heads = v.shape[1], k.shape[1]
    ratio = value_heads // key_heads
    out = np.zeros(v.shape)
    for b in range(state.shape[0]):
        for t in range(cu_seqlens[b], cu_seqlens[b + 1]):
            for h in range(value_heads):
                s = state[b, h].T * np.exp(decay[t, h])  # [Dk, Dv]
                kt, qt = k[t, h // ratio], q[t, h // ratio]
                delta = (v[t, h] - s.T @ kt) * beta[t, h]
                s = s + np.outer(kt, delta)
                out[t, h] = scale * s.T @ qt
                state[b, h] = s.T
    return out, state


# ----------------------------------------------------------------------------- compact state updates
# What onnxruntime-genai's paged engine does with the state_update outputs when it keeps only the
# first `kept` tokens of a verify step (FixedStateReservation::CommitPrefix): rebuild each sequence's
# state from the state before the step and the captured transitions.


def replay_conv(initial_state, conv_values, kept: int):
    """initial_state `[C, K-1]`, conv_values `[capacity, C]` (raw inputs of the first tokens) -> `[C, K-1]`:
    the carry state is the last K-1 inputs, so keeping `kept` tokens appends their inputs."""
    window = np.concatenate([np.asarray(initial_state, np.float64), np.asarray(conv_values, np.float64)[:kept].T],
                            axis=1)
    return window[:, window.shape[1] - initial_state.shape[1] :]


def replay_recurrent(initial_state, capsule, kept: int, *, capacity: int, key_heads: int):
    """initial_state V-major `[Hv, Dv, Dk]`, capsule `[capacity * (Hv + Hk*Dk + Hv*Dv)]` -> the state after
    the first `kept` tokens. The capsule is struct-of-arrays over the captured tokens: every token's decay
    factors (exp of the log-space decay), then every token's keys (shared key heads), then every token's
    deltas; one transition is S <- decay * S + delta (outer) key, value head h reading key head h // (Hv/Hk)."""
    state = np.array(initial_state, np.float64)
    value_heads, dv, dk = state.shape
    capsule = np.asarray(capsule, np.float64)
    decays = capsule[: capacity * value_heads].reshape(capacity, value_heads)
    offset = capacity * value_heads
    keys = capsule[offset : offset + capacity * key_heads * dk].reshape(capacity, key_heads, dk)
    deltas = capsule[offset + capacity * key_heads * dk :].reshape(capacity, value_heads, dv)
    ratio = value_heads // key_heads
    for t in range(kept):
        for h in range(value_heads):
            state[h] = decays[t, h] * state[h] + np.outer(deltas[t, h], keys[t, h // ratio])
    return state
