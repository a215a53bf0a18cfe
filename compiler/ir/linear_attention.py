"""The Gated DeltaNet (linear-attention) layers' sizes (Qwen3.5, Qwen3-Next); `mtpc.ir` re-exports them. Their
states are the runtimes' recurrent-state contract, which Mamba2's (`ir/mamba.py`) shares."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinearAttentionDims:
    """GatedDeltaNet sizes of the linear-attention layers."""

    num_key_heads: int
    key_head_dim: int
    num_value_heads: int
    value_head_dim: int
    conv_kernel: int

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def state_shapes(self) -> tuple[tuple[int, int], tuple[int, int, int]]:
        """(conv state `[conv_dim, K-1]`, recurrent state `[Hv, Dk, Dv]`) of one layer, without batch."""
        return (self.conv_dim, self.conv_kernel - 1), (self.num_value_heads, self.key_head_dim, self.value_head_dim)
