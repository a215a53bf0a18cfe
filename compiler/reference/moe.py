"""The numpy forward pass of Qwen3.5-MoE's sparse FFN, written from the model's definition.

Independent of the graph builder (which uses onnxruntime's fused `MoE` / `QMoE` ops): every
token is routed on its own, in float64, from the canonical weights (`mtpc.weights`).
"""

from __future__ import annotations

import numpy as np

from ..ir import MoeDims


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def route(logits: np.ndarray, moe: MoeDims) -> tuple[np.ndarray, np.ndarray]:
    """Router logits `[T, E]` -> (expert indices `[T, k]`, weights `[T, k]`): softmax, top-k, renormalize."""
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    # A stable sort on -p keeps the lower index first among equal probabilities, as torch.topk does on CPU.
    top = np.argsort(-probs, axis=-1, kind="stable")[:, : moe.top_k]
    weights = np.take_along_axis(probs, top, axis=-1)
    if moe.normalize_top_k:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return top, weights


def sparse_moe(w, moe: MoeDims, prefix: str, x: np.ndarray) -> np.ndarray:
    """The MoE FFN of the layer under `prefix` on `x` `[..., H]` (already post-attention-normed)."""
    p = prefix + "mlp."
    shape = x.shape
    tokens = x.reshape(-1, shape[-1])
    top, weights = route(tokens @ w[p + "gate.weight"].T, moe)
    gate, up, down = w[p + "experts.gate_proj.weight"], w[p + "experts.up_proj.weight"], w[p + "experts.down_proj.weight"]
    routed = np.zeros_like(tokens)
    for t in range(tokens.shape[0]):
        for e, weight in zip(top[t], weights[t]):
            hidden = _silu(gate[e] @ tokens[t]) * (up[e] @ tokens[t])
            routed[t] += weight * (down[e] @ hidden)
    s = p + "shared_expert."
    shared = (_silu(tokens @ w[s + "gate_proj.weight"].T) * (tokens @ w[s + "up_proj.weight"].T)) @ w[s + "down_proj.weight"].T
    if moe.shared_expert_sigmoid_gate:
        shared = shared / (1.0 + np.exp(-(tokens @ w[p + "shared_expert_gate.weight"].T)))
    return (routed + shared).reshape(shape)
