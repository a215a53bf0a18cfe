"""The mixture-of-experts part of the architecture IR (Qwen3.5-MoE's sparse FFN).

Qwen3.5-MoE (transformers' `Qwen3_5MoeSparseMoeBlock`) replaces every decoder layer's MLP,
the MTP block's included, with:

    p       = softmax(x @ router^T)                       # over all experts, float32
    top     = the top_k experts of p, weights p[top] / sum(p[top])   # renormalized
    routed  = sum_e weight_e * down_e(silu(gate_e(x)) * up_e(x))
    shared  = sigmoid(x @ shared_gate^T) * down_s(silu(gate_s(x)) * up_s(x))
    y       = routed + shared

There is no `decoder_sparse_step` / `mlp_only_layers` in Qwen3.5-MoE: every layer is sparse.
`mtpc.ir` re-exports this module's names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoeDims:
    num_experts: int
    top_k: int  # experts each token is routed to (HF num_experts_per_tok, GGUF expert_used_count)
    expert_intermediate_size: int  # HF moe_intermediate_size
    shared_expert_intermediate_size: int
    # Routing: softmax over all experts, top-k, then the k weights renormalized to sum to 1.
    # Qwen3.5-MoE always renormalizes (its config has no norm_topk_prob switch).
    normalize_top_k: bool = True
    # The shared expert's output is scaled by sigmoid(x @ shared_expert_gate^T), one gate per token.
    shared_expert_sigmoid_gate: bool = True

    def summary(self) -> str:
        """e.g. "8 experts, top-2 (softmax, renormalized), expert FFN 32, shared expert 48 (sigmoid gate)"."""
        routing = "softmax, renormalized" if self.normalize_top_k else "softmax"
        gate = " (sigmoid gate)" if self.shared_expert_sigmoid_gate else ""
        return (
            f"{self.num_experts} experts, top-{self.top_k} ({routing}), expert FFN {self.expert_intermediate_size}, "
            f"shared expert {self.shared_expert_intermediate_size}{gate}"
        )
