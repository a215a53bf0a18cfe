"""Token-layout-dependent ops for packed `[N, X]` graphs with a paged KV cache (onnxruntime CUDA only).

All sequences' new tokens are packed along one axis; `cumulative_sequence_lengths`
(`[B + 1]`) delimits them. Full attention is PagedAttention over
`[num_blocks, block_size, Hkv, D]` caches addressed through `block_table`;
linear layers use VarlenCausalConvWithState and GatedDeltaNet, whose recurrent
state is float32 and V-major `[B, Hv, Dv, Dk]`. PagedAttention has fp16 / bf16
kernels only, so these graphs cannot run on CPU (tests/lowering runs them there).

With compact state updates the linear-layer ops also capture the first
`state_update_capture_count[b]` tokens' transitions of each sequence (the conv's raw
inputs; the recurrence's decay, key and delta), from which the engine rebuilds the
state after an accepted prefix of a verify step.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as oir

from ..ir import Architecture, LayerAttention
from .blocks import split_heads
from .builder import MS, GraphBuilder

PAGED_IO_DTYPES = (oir.DataType.FLOAT16, oir.DataType.BFLOAT16)


@dataclass(frozen=True)
class StateUpdates:
    capacity: int
    capture_count: oir.Value  # int32 [B]
    active: oir.Value  # int32 [1], host-resident; 0 disables capture for a step


class PagedOps:
    lead = 1

    def __init__(self, b: GraphBuilder, block_table: oir.Value, cumulative_sequence_lengths: oir.Value,
                 past_sequence_lengths: oir.Value, attention_metadata: oir.Value,
                 state_updates: StateUpdates | None = None):
        if b.io_dtype not in PAGED_IO_DTYPES:
            # The spec rules refuse this combination before any graph is built.
            raise AssertionError(
                f"paged attention needs a float16 or bfloat16 io_dtype (PagedAttention has no "
                f"{b.io_dtype.name.lower()} kernel)"
            )
        self.block_table = block_table
        self.cumulative_sequence_lengths = cumulative_sequence_lengths
        self.past_sequence_lengths = past_sequence_lengths
        self.attention_metadata = attention_metadata
        self.state_updates = state_updates
        self._captured: list[oir.Value | None] = [None, None]

    def take_state_updates(self) -> tuple[oir.Value | None, oir.Value | None]:
        captured, self._captured = tuple(self._captured), [None, None]
        return captured

    def attention(self, b, q, k, v, past_key, past_value, arch: Architecture):
        # Inputs 8-15 (cos/sin caches, slot mapping, head sink, q/k norm weights, kv scales) stay empty:
        # rotary and q/k norms are applied before the op, and slots derive from the past lengths.
        inputs = [q, k, v, past_key, past_value, self.cumulative_sequence_lengths, self.past_sequence_lengths,
                  self.block_table, *([None] * 8), self.attention_metadata]
        attrs = {"num_heads": arch.num_attention_heads, "kv_num_heads": arch.num_key_value_heads,
                 "scale": arch.softmax_scale}
        out, key_cache, value_cache = b.op_multi("PagedAttention", inputs, attrs, name="PagedAttention",
                                                 num_outputs=3, domain=MS)
        return out, key_cache, value_cache

    def layer_attention(self, b, q, k, v, past_key, past_value, layer: LayerAttention, sinks=None):
        """PagedAttention with a layer's own heads, window (`local_window_size`) and sinks (input 11, `head_sink`)."""
        inputs = [q, k, v, past_key, past_value, self.cumulative_sequence_lengths, self.past_sequence_lengths,
                  self.block_table, None, None, None, sinks, None, None, None, None, self.attention_metadata]
        attrs = {"num_heads": layer.num_attention_heads, "kv_num_heads": layer.num_key_value_heads,
                 "scale": layer.softmax_scale}
        if layer.window is not None:
            attrs["local_window_size"] = layer.window
        out, key_cache, value_cache = b.op_multi("PagedAttention", inputs, attrs, name="PagedAttention",
                                                 num_outputs=3, domain=MS)
        return out, key_cache, value_cache

    def causal_conv(self, b, x, weight, past):
        inputs = [x, weight, self.cumulative_sequence_lengths, None, past]
        attrs = {"activation": "silu"}
        if self.state_updates:
            inputs.append(self.state_updates.capture_count)
            attrs["state_update_capacity"] = self.state_updates.capacity
        y, present, *update = b.op_multi("VarlenCausalConvWithState", inputs, attrs,
                                         name="conv/VarlenCausalConvWithState",
                                         num_outputs=3 if self.state_updates else 2, domain=MS)
        self._captured[0] = update[0] if update else None
        return y, present

    def recurrence(self, b, q, k, v, decay, beta, past, arch: Architecture):
        la = arch.linear_attention
        declared = tuple(d if isinstance(d, int) else None for d in past.shape)[-2:]
        if declared != (la.value_head_dim, la.key_head_dim):
            raise AssertionError(
                f"paged recurrent state {past.name} declared {past.shape}; GatedDeltaNet needs V-major "
                f"[B, Hv, Dv={la.value_head_dim}, Dk={la.key_head_dim}]"
            )
        v = split_heads(b, self, v, la.num_value_heads, la.value_head_dim, "v/Reshape")
        attrs = {"update_rule": "gated_delta", "scale": la.key_head_dim**-0.5}
        inputs = [q, k, v, self.cumulative_sequence_lengths, decay, beta, past]
        if self.state_updates:
            # a_log / dt_bias stay empty: the gate arrives computed.
            inputs += [None, None, self.state_updates.capture_count, self.state_updates.active]
            attrs["state_update_capacity"] = self.state_updates.capacity
        out, present, *update = b.op_multi("GatedDeltaNet", inputs, attrs, name="GatedDeltaNet",
                                           num_outputs=3 if self.state_updates else 2, domain=MS)
        self._captured[1] = update[0] if update else None
        return out, present
