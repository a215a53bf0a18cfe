"""The rotary tables' frequencies and factor: plain RoPE's, or YaRN-scaled (DeepSeek-V3) as transformers'
`_compute_yarn_parameters` computes them.

YaRN keeps the frequency of the slots that turn more than `beta_fast` times over the original context
(extrapolation), divides by `factor` the slots that turn fewer than `beta_slow` times (interpolation),
and ramps linearly between the two slots in between. The cos/sin factor is the IR's resolved
`attention_factor` (`yarn_scaled`, which `blocks.rotary` applies to cos and sin).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as oir

from ..ir import Rope
from .builder import GraphBuilder


def inverse_frequencies(rope: Rope) -> np.ndarray:
    """float32 `[rotary_dim / 2]`: radians per position of each frequency slot."""
    rd = rope.rotary_dim
    extrapolation = 1.0 / (rope.theta ** (np.arange(0, rd, 2, dtype=np.float64) / rd))
    yarn = rope.yarn
    if yarn is None:
        return extrapolation.astype(np.float32)
    interpolation = extrapolation / yarn.factor
    low, high = (_correction_dim(turns, rope, yarn.original_max_position_embeddings)
                 for turns in (yarn.beta_fast, yarn.beta_slow))
    if yarn.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rd - 1)
    if low == high:
        high += 0.001  # a zero-width ramp would divide by zero
    ramp = np.clip((np.arange(rd // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # the share of the unscaled frequency
    return (interpolation * (1.0 - keep) + extrapolation * keep).astype(np.float32)


def _correction_dim(turns: float, rope: Rope, context: int) -> float:
    """The (fractional) slot index that turns `turns` times over `context` positions."""
    return rope.rotary_dim * math.log(context / (turns * 2 * math.pi)) / (2 * math.log(rope.theta))


def yarn_scaled(b: GraphBuilder, table: oir.Value, rope: Rope, name: str) -> oir.Value:
    """A cos or sin table times YaRN's attention factor; the table itself when there is none (or it is 1), so
    the graph of plain RoPE has no extra node."""
    if rope.yarn is None or rope.yarn.attention_factor == 1.0:
        return table
    factor = b.constant("attention_factor", np.array(rope.yarn.attention_factor, np.float32))
    return b.op("Mul", [table, factor], name=name)
