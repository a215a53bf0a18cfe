"""Layer kinds and attention modes, which both the architecture and the runtime view name."""

from __future__ import annotations

import enum


class LayerKind(str, enum.Enum):
    FULL_ATTENTION = "full_attention"
    LINEAR_ATTENTION = "linear_attention"
    SLIDING_ATTENTION = "sliding_attention"
    # A Mamba2 state-space mixer (`ir/mamba.py`): conv and recurrent state like linear attention's.
    MAMBA2 = "mamba2"
    # A layer that is only the FFN (dense or MoE) in a family whose layers are one sub-block each (Nemotron-H).
    FEED_FORWARD = "feed_forward"

    @property
    def has_kv_cache(self) -> bool:
        return self in (LayerKind.FULL_ATTENTION, LayerKind.SLIDING_ATTENTION)

    @property
    def has_recurrent_state(self) -> bool:
        """A conv state and a recurrent state, in the runtimes' linear-attention contract."""
        return self in (LayerKind.LINEAR_ATTENTION, LayerKind.MAMBA2)


class AttentionMode(str, enum.Enum):
    DENSE = "dense"
    PAGED = "paged"
