"""Rotary position embeddings in the IR: NeoX half-split rotation, MRoPE rows, YaRN scaling (`mtpc.ir` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import added


@dataclass(frozen=True)
class YarnScaling:
    """YaRN's context extension of RoPE (DeepSeek-V3's `rope_scaling` type `yarn`), as transformers'
    `_compute_yarn_parameters` reads it: frequencies whose wavelength stays short of the original context
    keep their rotation (extrapolate), long ones are divided by `factor` (interpolate), with a linear ramp
    between the correction dims of `beta_fast` and `beta_slow` rotations; cos and sin are multiplied by
    `attention_factor` (the source resolves it from `mscale` / `mscale_all_dim`). The softmax's own mscale
    is `MlaDims.softmax_scale`'s, not this."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float = 1.0
    # transformers floors / ceils the correction dims (its `truncate`, true unless the config says not).
    truncate: bool = True

    def summary(self) -> str:
        return (f"yarn x{self.factor:g} from {self.original_max_position_embeddings} (beta {self.beta_fast:g}/"
                f"{self.beta_slow:g}, cos/sin x{self.attention_factor:g})")


@dataclass(frozen=True)
class Rope:
    theta: float
    partial_rotary_factor: float
    head_dim: int
    # Interleaved MRoPE sections (T, H, W) over rotary_dim / 2 frequency slots.
    mrope_section: tuple[int, ...] = ()
    mrope_interleaved: bool = True
    # Positions come as three rows (T, H, W), Qwen3.5's MRoPE input (equal rows for text); False: one row
    # per token (GLM-4.5's plain NeoX RoPE), the `[batch, sequence]` position_ids most runtimes feed.
    position_rows: bool = added(True)
    # YaRN-scaled frequencies (DeepSeek-V3); None: plain RoPE.
    yarn: YarnScaling | None = added(None)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)
