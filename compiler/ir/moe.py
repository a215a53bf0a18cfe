"""The mixture-of-experts part of the architecture IR: the sparse FFN of MoE families.

Qwen3.5-MoE (transformers' `Qwen3_5MoeSparseMoeBlock`) replaces every decoder layer's MLP,
the MTP block's included, with:

    p       = softmax(x @ router^T)                       # over all experts, float32
    top     = the top_k experts of p, weights p[top] / sum(p[top])   # renormalized
    routed  = sum_e weight_e * down_e(silu(gate_e(x)) * up_e(x))
    shared  = sigmoid(x @ shared_gate^T) * down_s(silu(gate_s(x)) * up_s(x))
    y       = routed + shared

GLM-4.5 (`Glm4MoeMoE`, DeepSeek-V3's "noaux_tc" routing) keeps the first `dense_layers` layers
dense and routes the others (and its MTP block) with sigmoid scores:

    s       = sigmoid(x @ router^T)                       # float32
    c       = s + selection_bias                          # the bias chooses experts, never weighs them
    groups  = the top_k_groups of num_groups groups, each scored by the sum of its two best c
    top     = the top_k experts of c within those groups, weights s[top] (/ sum(s[top]) if normalized)
    y       = routed_scaling_factor * sum_e weight_e * expert_e(x) + shared(x)   # shared expert ungated

`mtpc.ir` re-exports this module's names.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fields import added

SOFTMAX = "softmax"
SIGMOID = "sigmoid"


@dataclass(frozen=True)
class MoeDims:
    num_experts: int
    top_k: int  # experts each token is routed to (HF num_experts_per_tok, GGUF expert_used_count)
    expert_intermediate_size: int  # HF moe_intermediate_size
    shared_expert_intermediate_size: int
    # The top-k weights renormalized to sum to 1. Qwen3.5-MoE always renormalizes (its config has no
    # norm_topk_prob switch); GLM-4.5's `norm_topk_prob`.
    normalize_top_k: bool = True
    # The shared expert's output is scaled by sigmoid(x @ shared_expert_gate^T), one gate per token.
    shared_expert_sigmoid_gate: bool = True
    # How router logits become scores: SOFTMAX over all experts, or SIGMOID per expert.
    scoring: str = added(SOFTMAX)
    # A per-expert bias added to the scores for choosing experts only (`mlp.gate.e_score_correction_bias`).
    selection_bias: bool = added(False)
    # Group-limited routing: experts in `num_groups` equal groups, only the `top_k_groups` best groups chosen from.
    num_groups: int = added(1)
    top_k_groups: int = added(1)
    # The routed experts' sum is multiplied by this (GLM's `routed_scaling_factor`).
    routed_scaling_factor: float = added(1.0)
    # The first `dense_layers` trunk layers have a dense MLP (`Architecture.intermediate_size`) instead.
    dense_layers: int = added(0)
    # The MTP block's FFN is this sparse one (Qwen3.5-MoE, GLM); False: a dense MLP (Step-3.5's MTP layers).
    sparse_mtp: bool = added(True)

    def summary(self) -> str:
        """e.g. "8 experts, top-2 (softmax, renormalized), expert FFN 32, shared expert 48 (sigmoid gate)"."""
        routing = [self.scoring]
        if self.selection_bias:
            routing.append("selection bias")
        if self.num_groups > 1:
            routing.append(f"top-{self.top_k_groups} of {self.num_groups} groups")
        if self.normalize_top_k:
            routing.append("renormalized")
        if self.routed_scaling_factor != 1.0:
            routing.append(f"scaled by {self.routed_scaling_factor:g}")
        gate = " (sigmoid gate)" if self.shared_expert_sigmoid_gate else ""
        dense = f"; the first {self.dense_layers} layer(s) dense" if self.dense_layers else ""
        return (
            f"{self.num_experts} experts, top-{self.top_k} ({', '.join(routing)}), "
            f"expert FFN {self.expert_intermediate_size}, shared expert {self.shared_expert_intermediate_size}{gate}{dense}"
        )


@dataclass(frozen=True)
class SwigluLimits:
    """Step-3.5's per-layer clamps of the SwiGLU (`swiglu_limits`, `swiglu_limits_shared`), transformers'
    `Step3p7MLP` / `Step3p7Experts`: `min(silu(gate), L) * clip(up, -L, L)`, the clamp after the activation.
    `routed` bounds a layer's routed experts, `shared` its shared expert or its dense MLP; one entry per trunk
    layer, then per MTP layer; 0 leaves the layer unclamped."""

    routed: tuple[float, ...]
    shared: tuple[float, ...]

    def of(self, index: int) -> tuple[float, float]:
        """(routed, shared) bound of layer `index` (trunk layers first, then the MTP layers): 0 = none."""
        return (self.routed[index] if index < len(self.routed) else 0.0,
                self.shared[index] if index < len(self.shared) else 0.0)

