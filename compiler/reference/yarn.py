"""YaRN's rotary frequencies and cos/sin factor for the numpy reference (DeepSeek-V3's `rope_scaling`).

Written from transformers' `modeling_rope_utils._compute_yarn_parameters`, in float64 and sharing
nothing with the graphs' tables (`graphs/blocks.rotary`). Slot i of the rotary_dim / 2 frequencies
turns `theta ** (-2i / rotary_dim)` per position. Counting how many turns slot i makes over the
original context, `d(r)` is the (fractional) slot that makes r turns; slots below `d(beta_fast)` turn
often enough to keep their frequency, slots above `d(beta_slow)` are slowed by `factor`, and the ones
in between blend linearly (transformers rounds the two bounds outwards unless `truncate` is false).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import YarnScaling


def _slot_of_turns(turns: float, rotary_dim: int, theta: float, context: int) -> float:
    # Slot i's wavelength is 2 pi theta^(2i/d); it makes context / wavelength turns over the context.
    # Solved for i: i = d * ln(context / (2 pi turns)) / (2 ln theta).
    return rotary_dim * math.log(context / (2 * math.pi * turns)) / (2 * math.log(theta))


def inverse_frequencies(rotary_dim: int, theta: float, yarn: YarnScaling | None) -> np.ndarray:
    """float64 `[rotary_dim / 2]`: the angle per position of each frequency slot."""
    slots = np.arange(rotary_dim // 2, dtype=np.float64)
    plain = theta ** (-2.0 * slots / rotary_dim)
    if yarn is None:
        return plain
    fast = _slot_of_turns(yarn.beta_fast, rotary_dim, theta, yarn.original_max_position_embeddings)
    slow = _slot_of_turns(yarn.beta_slow, rotary_dim, theta, yarn.original_max_position_embeddings)
    if yarn.truncate:
        fast, slow = math.floor(fast), math.ceil(slow)
    fast, slow = max(fast, 0), min(slow, rotary_dim - 1)
    width = slow - fast if slow != fast else 0.001  # transformers' guard against a zero-width ramp
    interpolated = np.clip((slots - fast) / width, 0.0, 1.0)  # 0: keep the frequency, 1: divide it by factor
    return plain * (1.0 - interpolated) + plain / yarn.factor * interpolated


def attention_factor(yarn: YarnScaling | None) -> float:
    """What cos and sin are multiplied by (1 without YaRN)."""
    return 1.0 if yarn is None else yarn.attention_factor
