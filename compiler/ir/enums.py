"""Layer kinds and attention modes, which both the architecture and the runtime view name."""

from __future__ import annotations

import enum


class LayerKind(str, enum.Enum):
    FULL_ATTENTION = "full_attention"
    LINEAR_ATTENTION = "linear_attention"
    SLIDING_ATTENTION = "sliding_attention"


class AttentionMode(str, enum.Enum):
    DENSE = "dense"
    PAGED = "paged"
