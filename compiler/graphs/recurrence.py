"""What a layer with a recurrent state hands the linear-attention ops (`SequenceOps.recurrence`): the update rule
and the head geometry, Gated DeltaNet's (`gated_delta_rule`) or Mamba2's (`mamba2.mamba2_rule`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Architecture


@dataclass(frozen=True)
class Recurrence:
    """What a linear-attention layer's recurrence runs: onnxruntime's update rule over `key_heads` q/k heads of
    `key_dim` and `value_heads` value heads of `value_dim` (value head j reads key head j // (Hv / Hk)), and the
    output scale. Gated DeltaNet's is `gated_delta`; Mamba2's `gated` (q = C, k = B, v = dt x, no beta)."""

    update_rule: str
    key_heads: int
    key_dim: int
    value_heads: int
    value_dim: int
    scale: float


def gated_delta_rule(arch: Architecture) -> Recurrence:
    la = arch.linear_attention
    assert la is not None
    return Recurrence("gated_delta", la.num_key_heads, la.key_head_dim, la.num_value_heads, la.value_head_dim,
                      la.key_head_dim**-0.5)
