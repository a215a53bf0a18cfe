"""The numpy forward pass of the sparse FFNs, written from the models' definitions.

Qwen3.5-MoE: softmax over all experts, top-k, renormalized; a shared expert behind a sigmoid gate.
GLM-4.5 (DeepSeek-V3's routing, transformers' `Glm4MoeTopkRouter`): sigmoid scores, a selection bias
that only chooses, the best `top_k_groups` of `num_groups` groups (each scored by its two best
experts), top-k within them, the unbiased scores as weights (renormalized if `normalize_top_k`),
times `routed_scaling_factor`; an ungated shared expert. Independent of the graph builder (which
uses onnxruntime's fused `MoE` / `QMoE` ops): every token is routed on its own, in float64, from the
canonical weights (`mtpc.weights`).
"""

from __future__ import annotations

import numpy as np

from ..ir import MoeDims
from ..ir.moe import SIGMOID


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def swiglu(gate: np.ndarray, up: np.ndarray, limit: float = 0.0) -> np.ndarray:
    """silu(gate) * up; with a `limit` (Step-3.5's `swiglu_limits`), min(silu(gate), limit) * clip(up, -limit, limit)."""
    if not limit:
        return _silu(gate) * up
    return np.minimum(_silu(gate), limit) * np.clip(up, -limit, limit)


def route(logits: np.ndarray, moe: MoeDims, selection_bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Router logits `[T, E]` -> (expert indices `[T, k]`, weights `[T, k]`), the scaling factor included."""
    if moe.scoring == SIGMOID:
        return _sigmoid_route(logits, moe, selection_bias)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    # A stable sort on -p keeps the lower index first among equal probabilities, as torch.topk does on CPU.
    top = np.argsort(-probs, axis=-1, kind="stable")[:, : moe.top_k]
    weights = np.take_along_axis(probs, top, axis=-1)
    if moe.normalize_top_k:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return top, weights


def _sigmoid_route(logits: np.ndarray, moe: MoeDims, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    scores = 1.0 / (1.0 + np.exp(-logits))
    choice = scores if bias is None else scores + bias
    t, e = choice.shape
    if moe.num_groups > 1:
        grouped = choice.reshape(t, moe.num_groups, e // moe.num_groups)
        group_scores = np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1)
        kept = np.argsort(-group_scores, axis=-1, kind="stable")[:, : moe.top_k_groups]
        keep = np.zeros((t, moe.num_groups), bool)
        np.put_along_axis(keep, kept, True, axis=-1)
        choice = np.where(np.repeat(keep, e // moe.num_groups, axis=-1), choice, -np.inf)
    top = np.argsort(-choice, axis=-1, kind="stable")[:, : moe.top_k]
    weights = np.take_along_axis(scores, top, axis=-1)
    if moe.normalize_top_k:
        weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)
    return top, weights * moe.routed_scaling_factor


def sparse_moe(w, moe: MoeDims, prefix: str, x: np.ndarray, limits: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """The MoE FFN of the layer under `prefix` on `x` `[..., H]` (already post-attention-normed); `limits`: the
    SwiGLU clamps of its routed experts and of its shared expert (0: none)."""
    p = prefix + "mlp."
    shape = x.shape
    tokens = x.reshape(-1, shape[-1])
    bias = w[p + "gate.e_score_correction_bias"] if moe.selection_bias else None
    top, weights = route(tokens @ w[p + "gate.weight"].T, moe, bias)
    gate, up, down = w[p + "experts.gate_proj.weight"], w[p + "experts.up_proj.weight"], w[p + "experts.down_proj.weight"]
    routed = np.zeros_like(tokens)
    for t in range(tokens.shape[0]):
        for e, weight in zip(top[t], weights[t]):
            hidden = swiglu(gate[e] @ tokens[t], up[e] @ tokens[t], limits[0])
            routed[t] += weight * (down[e] @ hidden)
    s = p + "shared_expert."
    shared = swiglu(tokens @ w[s + "gate_proj.weight"].T, tokens @ w[s + "up_proj.weight"].T, limits[1]) @ w[s + "down_proj.weight"].T
    if moe.shared_expert_sigmoid_gate:
        shared = shared / (1.0 + np.exp(-(tokens @ w[p + "shared_expert_gate.weight"].T)))
    return (routed + shared).reshape(shape)
