"""Mamba2 layers (the state-space mixer of Nemotron-H), as transformers' `NemotronHMamba2Mixer` defines them.

Per token `x` (already input-normed), with `H` heads of `P` channels, an `N`-wide state and `G` groups:

    z | xBC | dt = in_proj(x)                         # [H*P | H*P + 2*G*N | H]
    xBC          = silu(causal_conv1d(xBC) + conv_bias)  # depthwise, kernel K, its state the last K-1 inputs
    x | B | C    = xBC                                # x [H, P]; B, C [G, N], group g shared by heads
                                                      #   g*H/G .. (g+1)*H/G - 1 (contiguous, repeat_interleave)
    dt           = softplus(dt + dt_bias)             # [H], no clamp (mtpc's decision: docs/families/nemotron_h.md)
    S_h          = exp(dt_h * A_h) S_h + B_g(h) (dt_h x_h)^T    # A = -exp(A_log), S_h [N, P]
    y_h          = C_g(h) S_h + D_h x_h
    y            = rms_norm_by_group(y * silu(z)) * norm_weight   # G groups of H*P/G channels, gate first
    out          = out_proj(y)

The recurrence is onnxruntime's LinearAttention `update_rule: "gated"` with q = C, k = B, v = dt x,
log decay dt A and scale 1; its state `[H, N, P]` and the conv state `[conv_dim, K-1]` have the shapes of
a Gated DeltaNet layer's with `G` key heads of `N` and `H` value heads of `P` (`state_shapes`), so the
runtimes' state contract, the state window and the crop path are Qwen3.5's. Chunking is a kernel's
choice and no fact of the model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mamba2Dims:
    num_heads: int  # HF mamba_num_heads
    head_dim: int  # HF mamba_head_dim
    state_size: int  # HF ssm_state_size
    num_groups: int  # HF n_groups
    conv_kernel: int  # HF conv_kernel
    conv_bias: bool = True  # HF use_conv_bias

    @property
    def inner_size(self) -> int:
        """Channels of x, z and y: heads x head dim."""
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: x, B and C."""
        return self.inner_size + 2 * self.num_groups * self.state_size

    @property
    def in_proj_rows(self) -> int:
        """in_proj's output rows: [z | xBC | dt]."""
        return self.inner_size + self.conv_dim + self.num_heads

    def state_shapes(self) -> tuple[tuple[int, int], tuple[int, int, int]]:
        """(conv state `[conv_dim, K-1]`, recurrent state `[H, N, P]`) of one layer, without batch."""
        return (self.conv_dim, self.conv_kernel - 1), (self.num_heads, self.state_size, self.head_dim)

    def summary(self) -> str:
        return (f"Mamba2: {self.num_heads} heads x {self.head_dim}, state {self.state_size}, {self.num_groups} groups, "
                f"conv {self.conv_kernel}")
