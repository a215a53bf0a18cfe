"""A numpy forward pass of the main decoder and its MTP head, for checking graphs.

Qwen3.5's hybrid decoder is written here; GLM-4.5's attention in `glm4moe.py`, MLA's in `deepseek2.py`, the
sparse FFNs in `moe.py`.

Written from the architecture notes (`qwen35-mtp-architecture.md`), sharing no code
with the graph builders, so a graph that agrees with it agrees with the model and
not with itself. Everything is computed in float64 from the canonical weights
(`mtpc.weights`: offset norms already hold `1 + w`, `decay_scale = -exp(A_log)`),
so float32 / float16 graphs are compared against a result whose own rounding
error is negligible.

Only dense full batches: every row of a batch has the same length, no padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import Architecture, LayerKind, SeedHidden
from . import deepseek2, glm4moe, step35
from .moe import sparse_moe, swiglu
from .primitives import causal_attention, rms_norm, rope  # noqa: F401  (callers import them from here too)
from ..weights import WeightStore


@dataclass(frozen=True)
class DecoderState:
    """Caches after some tokens. Keys are absolute layer indices.

    `kv[i]` = (keys, values) `[B, KVH, T, HD]`, keys stored after RoPE (as
    GroupQueryAttention's `present` holds them); `conv[i]` `[B, conv_dim, K-1]`;
    `recurrent[i]` `[B, Hv, Dk, Dv]`.
    """

    length: int
    kv: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    conv: dict[int, np.ndarray] = field(default_factory=dict)
    recurrent: dict[int, np.ndarray] = field(default_factory=dict)


# ----------------------------------------------------------------------------- building blocks


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def l2_normalize(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(sum(x^2) + eps) over the last axis (the HF GatedDeltaNet convention)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def causal_conv1d(x: np.ndarray, state: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise causal convolution continuing from `state`, before the activation.

    x `[B, C, S]`, state `[B, C, K-1]` (the previous K-1 inputs), weight `[C, 1, K]`
    (tap K-1 multiplies the current input, as PyTorch's left-padded conv1d).
    Returns (output `[B, C, S]`, new state = last K-1 inputs of `[state | x]`).
    """
    kernel, s = weight.shape[-1], x.shape[2]
    padded = np.concatenate([state, x], axis=2)
    out = np.zeros_like(x)
    for tap in range(kernel):
        out += weight[None, :, 0, tap, None] * padded[:, :, tap : tap + s]
    return out, padded[:, :, padded.shape[2] - (kernel - 1) :]


def gated_delta_rule(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, state: np.ndarray, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """The gated delta recurrence, one token at a time.

    q, k `[B, S, Hv, Dk]` (already per value head), v `[B, S, Hv, Dv]`, g / beta
    `[B, S, Hv]`, state `[B, Hv, Dk, Dv]`. Per token: S <- S*exp(g);
    delta = (v - S^T k)*beta; S <- S + k (outer) delta; o = scale * S^T q.
    """
    b, s, hv, dv = v.shape
    out = np.empty((b, s, hv, dv))
    for t in range(s):
        state = state * np.exp(g[:, t])[:, :, None, None]
        remembered = np.einsum("bhkv,bhk->bhv", state, k[:, t])
        delta = (v[:, t] - remembered) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = scale * np.einsum("bhkv,bhk->bhv", state, q[:, t])
    return out, state


class _Weights:
    """float64 copies of the canonical weights, read once."""

    def __init__(self, store: WeightStore):
        self._store = store
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = np.asarray(self._store.read_float(name), dtype=np.float64)
        return self._cache[name]

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self[name].T


def full_attention(
    w: _Weights,
    arch: Architecture,
    prefix: str,
    x: np.ndarray,
    positions: np.ndarray,
    past: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Gated attention. x `[B, S, H]` (already input-normed); returns (output, new (keys, values))."""
    b, s, _ = x.shape
    nh, kvh, hd = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    p = prefix + "self_attn."
    q_gate = w.linear(x, p + "q_proj.weight").reshape(b, s, nh, 2 * hd)
    q, gate = q_gate[..., :hd], q_gate[..., hd:].reshape(b, s, nh * hd)
    k = w.linear(x, p + "k_proj.weight").reshape(b, s, kvh, hd)
    v = w.linear(x, p + "v_proj.weight").reshape(b, s, kvh, hd)
    q = rms_norm(q, w[p + "q_norm.weight"], arch.rms_norm_eps)
    k = rms_norm(k, w[p + "k_norm.weight"], arch.rms_norm_eps)
    rd, theta, sections = arch.rope.rotary_dim, arch.rope.theta, arch.rope.mrope_section
    q, k = rope(q, positions, rd, theta, mrope_section=sections), rope(k, positions, rd, theta, mrope_section=sections)
    attn, kv = causal_attention(q, k, v, past, nh // kvh)
    return w.linear(attn * sigmoid(gate), p + "o_proj.weight"), kv


def gated_delta_net(
    w: _Weights,
    arch: Architecture,
    prefix: str,
    x: np.ndarray,
    conv_state: np.ndarray,
    recurrent_state: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linear attention. x `[B, S, H]` (already input-normed); returns (output, conv state, recurrent state)."""
    la = arch.linear_attention
    assert la is not None
    b, s, _ = x.shape
    p = prefix + "linear_attn."
    mixed = w.linear(x, p + "in_proj_qkv.weight").transpose(0, 2, 1)  # [B, conv_dim, S], channels [q | k | v]
    conv, new_conv_state = causal_conv1d(mixed, conv_state, w[p + "conv1d.weight"])
    qkv = silu(conv).transpose(0, 2, 1)  # [B, S, conv_dim]
    q = qkv[..., : la.key_dim].reshape(b, s, la.num_key_heads, la.key_head_dim)
    k = qkv[..., la.key_dim : 2 * la.key_dim].reshape(b, s, la.num_key_heads, la.key_head_dim)
    v = qkv[..., 2 * la.key_dim :].reshape(b, s, la.num_value_heads, la.value_head_dim)
    q, k = l2_normalize(q), l2_normalize(k)
    ratio = la.num_value_heads // la.num_key_heads
    q, k = np.repeat(q, ratio, axis=2), np.repeat(k, ratio, axis=2)  # grouped: value head j uses key head j // ratio
    beta = sigmoid(w.linear(x, p + "in_proj_b.weight"))  # [B, S, Hv]
    g = w[p + "decay_scale"] * softplus(w.linear(x, p + "in_proj_a.weight") + w[p + "dt_bias"])
    out, state = gated_delta_rule(q, k, v, g, beta, recurrent_state, 1.0 / np.sqrt(la.key_head_dim))
    z = w.linear(x, p + "in_proj_z.weight").reshape(b, s, la.num_value_heads, la.value_head_dim)
    gated = rms_norm(out, w[p + "norm.weight"], arch.rms_norm_eps) * silu(z)
    return w.linear(gated.reshape(b, s, la.value_dim), p + "out_proj.weight"), new_conv_state, state


def mlp(w: _Weights, prefix: str, x: np.ndarray, limit: float = 0.0) -> np.ndarray:
    p = prefix + "mlp."
    hidden = swiglu(w.linear(x, p + "gate_proj.weight"), w.linear(x, p + "up_proj.weight"), limit)
    return w.linear(hidden, p + "down_proj.weight")


def feed_forward(w: _Weights, arch: Architecture, prefix: str, x: np.ndarray, layer: int | None) -> np.ndarray:
    """Trunk layer `layer`'s FFN (None: the MTP block's): the dense MLP, or the sparse MoE block of a MoE
    family (`reference/moe.py`), SwiGLU-clamped where the layer is (`Architecture.swiglu_limit`)."""
    limits = arch.swiglu_limit(layer)
    if arch.moe is not None and arch.is_sparse(layer):
        return sparse_moe(w, arch.moe, prefix, x, limits)
    return mlp(w, prefix, x, limits[1])


def attention_of(arch: Architecture):
    """The family's attention layer: Qwen3.5's gated attention, GLM-4.5's (`reference/glm4moe.py`), Step-3.5's
    (`reference/step35.py`, full and sliding), or multi-head latent attention (`reference/deepseek2.py`, which
    caches the latent as one KV head)."""
    if arch.mla is not None:
        return deepseek2.attention
    return {"glm4moe": glm4moe.attention, "step35": step35.attention}.get(arch.family, full_attention)


def attend(w: _Weights, arch: Architecture, prefix: str, x: np.ndarray, positions: np.ndarray, past,
           kind: LayerKind):
    """A layer of `kind`'s attention: the family's, a sliding layer's told its own geometry (`layer_attention`)."""
    extra = {"layer": arch.layer_attention(kind)} if kind is LayerKind.SLIDING_ATTENTION else {}
    return attention_of(arch)(w, arch, prefix, x, positions, past, **extra)


def empty_kv(arch: Architecture, kind: LayerKind, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """A layer of `kind`'s empty cache: keys `[B, KVH, 0, HD]`, values `[B, KVH, 0, VD]` (the layer's own widths)."""
    if arch.mla is not None:
        return (np.zeros((batch, arch.num_key_value_heads, 0, arch.head_dim)),) * 2
    layer = arch.layer_attention(kind)
    return (np.zeros((batch, layer.num_key_value_heads, 0, layer.head_dim)),
            np.zeros((batch, layer.num_key_value_heads, 0, layer.value_head_dim)))


def _positions(batch: int, start: int, count: int) -> np.ndarray:
    return np.broadcast_to(start + np.arange(count), (batch, count))


# ----------------------------------------------------------------------------- the main decoder


class DecoderReference:
    """The trunk: embedding, the family's layers (Qwen3.5's hybrid ones, GLM-4.5's), final norm, LM head."""

    def __init__(self, arch: Architecture, weights: WeightStore):
        self.arch = arch
        self.w = _Weights(weights)

    def initial_state(self, batch: int) -> DecoderState:
        arch, la = self.arch, self.arch.linear_attention
        conv, recurrent = {}, {}
        for i in arch.layers_of(LayerKind.LINEAR_ATTENTION):
            assert la is not None
            conv[i] = np.zeros((batch, la.conv_dim, la.conv_kernel - 1))
            recurrent[i] = np.zeros((batch, la.num_value_heads, la.key_head_dim, la.value_head_dim))
        kv = {i: empty_kv(arch, arch.layer_kinds[i], batch) for i in arch.attention_layers}
        return DecoderState(0, kv, conv, recurrent)

    def forward(
        self, input_ids: np.ndarray, state: DecoderState | None = None, *, inputs_embeds: np.ndarray | None = None,
        positions: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, DecoderState]:
        """Run `input_ids` `[B, S]` after `state` (positions continue from `state.length`), or `inputs_embeds`
        `[B, S, H]` (input_ids then only sizes the batch), at `positions` when given (`[3, B, S]` MRoPE rows).

        Returns (logits `[B,S,V]`, post-final-norm hidden `[B,S,H]`, pre-norm hidden
        (last layer's residual output) `[B,S,H]`, new state).
        """
        input_ids = np.asarray(input_ids)
        b, s = input_ids.shape
        if state is None:
            state = self.initial_state(b)
        arch, w = self.arch, self.w
        if positions is None:
            positions = _positions(b, state.length, s)
        x = w["embed_tokens.weight"][input_ids] if inputs_embeds is None else np.asarray(inputs_embeds, np.float64)
        kv, conv, recurrent = dict(state.kv), dict(state.conv), dict(state.recurrent)
        for i, kind in enumerate(arch.layer_kinds):
            prefix = f"layers.{i}."
            normed = rms_norm(x, w[prefix + "input_layernorm.weight"], arch.rms_norm_eps)
            if kind in (LayerKind.FULL_ATTENTION, LayerKind.SLIDING_ATTENTION):
                mixed, kv[i] = attend(w, arch, prefix, normed, positions, kv[i], kind)
            elif kind is LayerKind.LINEAR_ATTENTION:
                mixed, conv[i], recurrent[i] = gated_delta_net(w, arch, prefix, normed, conv[i], recurrent[i])
            else:
                raise NotImplementedError(f"reference has no {kind.value} layer")
            x = x + mixed
            x = x + feed_forward(w, arch, prefix, rms_norm(x, w[prefix + "post_attention_layernorm.weight"], arch.rms_norm_eps), i)
        post = rms_norm(x, w["norm.weight"], arch.rms_norm_eps)
        logits = post @ w["lm_head.weight"].T
        return logits, post, x, DecoderState(state.length + s, kv, conv, recurrent)

    def greedy(self, prompt_ids, steps: int) -> list[int]:
        """`steps` greedy tokens after `prompt_ids` (batch 1), one token per step after the prefill."""
        logits, _, _, state = self.forward(np.asarray(prompt_ids, dtype=np.int64)[None, :])
        tokens: list[int] = []
        for _ in range(steps):
            tokens.append(int(np.argmax(logits[0, -1])))
            logits, _, _, state = self.forward(np.array([[tokens[-1]]]), state)
        return tokens


Qwen35Reference = DecoderReference  # the name the Qwen3.5 callers know


# ----------------------------------------------------------------------------- the MTP head


class MtpHeadReference:
    """One MTP block: fc(concat[enorm(embed(ids)), hnorm(seed)]) -> attention layer + MLP -> mtp.norm -> lm_head.

    `own_lm_head`: the head's own copy `mtp.lm_head.weight` in place of `lm_head.weight` (the default where the
    architecture's head has its own, `mtp_own_lm_head`); with `draft_vocabulary` (ascending ids, the rows of that
    copy) only those tokens are scored and every other logit is -inf (the graph writes its dtype's lowest value
    there). `seed_hidden`: which hidden state seeds the head, and so which one it hands the next chained draft
    (the space its `pre_fc_norm_hidden` reads): post_norm, after `mtp.norm`; pre_norm, the block's output before it.
    """

    def __init__(self, arch: Architecture, weights: WeightStore, *, own_lm_head: bool | None = None,
                 draft_vocabulary: tuple[int, ...] | None = None, seed_hidden: SeedHidden | None = None):
        if arch.mtp_num_layers < 1:
            raise ValueError("architecture has no MTP head")
        self.arch = arch
        self.w = _Weights(weights)
        own_lm_head = arch.mtp_own_lm_head if own_lm_head is None else own_lm_head
        self.lm_head = "mtp.lm_head.weight" if own_lm_head or draft_vocabulary is not None else "lm_head.weight"
        self.pre_norm = (arch.mtp_seed_hidden if seed_hidden is None else seed_hidden) is SeedHidden.PRE_NORM
        self.draft_vocabulary = None if draft_vocabulary is None else np.asarray(draft_vocabulary, np.int64)

    def logits(self, out: np.ndarray) -> np.ndarray:
        scores = out @ self.w[self.lm_head].T
        if self.draft_vocabulary is None:
            return scores
        full = np.full((*scores.shape[:-1], self.arch.vocab_size), -np.inf)
        full[..., self.draft_vocabulary] = scores
        return full

    def empty_kv(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        return empty_kv(self.arch, self.arch.mtp_layer_kind, batch)

    def forward(
        self,
        input_ids: np.ndarray,
        seed_hidden: np.ndarray,
        positions: np.ndarray,
        kv_state: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """input_ids `[B,S]`, seed_hidden `[B,S,H]`, positions `[B,S]` (absolute, used for RoPE).

        Returns (logits `[B,S,V]`, the hidden state handed on `[B,S,H]` (after `mtp.norm`, or before it with a
        pre-norm seed), new (keys, values)).
        The head's own cache is visible in full; new tokens see each other causally.
        """
        input_ids = np.asarray(input_ids)
        b, s = input_ids.shape
        arch, w, eps = self.arch, self.w, self.arch.rms_norm_eps
        positions = np.broadcast_to(np.asarray(positions), (b, s))
        if kv_state is None:
            kv_state = self.empty_kv(b)
        embedded = rms_norm(w["embed_tokens.weight"][input_ids], w["mtp.pre_fc_norm_embedding.weight"], eps)
        hidden = rms_norm(np.asarray(seed_hidden, dtype=np.float64), w["mtp.pre_fc_norm_hidden.weight"], eps)
        x = w.linear(np.concatenate([embedded, hidden], axis=-1), "mtp.fc.weight")  # embedding first
        prefix = "mtp.layers.0."
        mixed, new_kv = attend(w, arch, prefix, rms_norm(x, w[prefix + "input_layernorm.weight"], eps), positions,
                               kv_state, arch.mtp_layer_kind)
        x = x + mixed
        x = x + feed_forward(w, arch, prefix, rms_norm(x, w[prefix + "post_attention_layernorm.weight"], eps), None)
        out = rms_norm(x, w["mtp.norm.weight"], eps)
        return self.logits(out), x if self.pre_norm else out, new_kv
