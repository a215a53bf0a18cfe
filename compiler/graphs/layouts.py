"""Which token-layout ops a decoder graph is built with: dense `[B, S, X]` (`sequence.py`), dense with a
window of per-token linear-attention states (`state_window.py`: built from ops, or the kernels' own attribute), or packed paged `[N, X]` (`paged.py`)."""

from __future__ import annotations

from ..ir.contracts import PAGED_INPUT_NAMES
from ..ir import AttentionMode, DecoderConfig
from .blocks import SequenceOps
from .builder import GraphBuilder
from .paged import PagedOps, StateUpdates
from .roles import input_name
from .sequence import DenseOps
from .state_window import FusedWindowOps, WindowedDenseOps


def sequence_ops(b: GraphBuilder, cfg: DecoderConfig) -> SequenceOps:
    if cfg.attention is AttentionMode.PAGED:
        updates = None
        if cfg.state_update_capacity:
            updates = StateUpdates(cfg.state_update_capacity, b.inputs[input_name(cfg, "state_update_capture_count")],
                                   b.inputs[input_name(cfg, "state_update_active")])
        return PagedOps(b, *(b.inputs[input_name(cfg, role)] for role in PAGED_INPUT_NAMES), state_updates=updates)
    if cfg.state_window and b.kernels.state_window:
        return FusedWindowOps(b, b.inputs[input_name(cfg, "attention_mask")], cfg.state_window)
    if cfg.state_window:
        return WindowedDenseOps(b, b.inputs[input_name(cfg, "attention_mask")], b.inputs[input_name(cfg, "input_ids")],
                                cfg.state_window, cfg.conv_kernel - 1)
    return DenseOps(b, b.inputs[input_name(cfg, "attention_mask")])
