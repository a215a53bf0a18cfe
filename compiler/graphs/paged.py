"""Token-layout-dependent ops for packed `[N, X]` graphs with a paged KV cache (onnxruntime CUDA only).

All sequences' new tokens are packed along one axis; `cumulative_sequence_lengths`
(`[B + 1]`) delimits them. Full attention is PagedAttention over
`[num_blocks, block_size, Hkv, D]` caches addressed through `block_table`;
linear layers use VarlenCausalConvWithState and GatedDeltaNet, whose recurrent
state is float32 and V-major `[B, Hv, Dv, Dk]`. PagedAttention has fp16 / bf16
kernels only, so these graphs cannot run on CPU.
"""

from __future__ import annotations

import onnx_ir as oir

from ..ir import Architecture
from .builder import MS, GraphBuilder

PAGED_IO_DTYPES = (oir.DataType.FLOAT16, oir.DataType.BFLOAT16)


class PagedOps:
    lead = 1

    def __init__(self, b: GraphBuilder, block_table: oir.Value, cumulative_sequence_lengths: oir.Value,
                 past_sequence_lengths: oir.Value, attention_metadata: oir.Value):
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

    def attention(self, b, q, k, v, past_key, past_value, arch: Architecture):
        # Inputs 8-15 (cos/sin caches, slot mapping, head sink, q/k norm weights, kv scales) stay empty:
        # rotary and q/k norms are applied before the op, and slots derive from the past lengths.
        inputs = [q, k, v, past_key, past_value, self.cumulative_sequence_lengths, self.past_sequence_lengths,
                  self.block_table, *([None] * 8), self.attention_metadata]
        attrs = {"num_heads": arch.num_attention_heads, "kv_num_heads": arch.num_key_value_heads,
                 "scale": arch.head_dim**-0.5}
        out, key_cache, value_cache = b.op_multi("PagedAttention", inputs, attrs, name="PagedAttention",
                                                 num_outputs=3, domain=MS)
        return out, key_cache, value_cache

    def causal_conv(self, b, x, weight, past):
        y, present = b.op_multi(
            "VarlenCausalConvWithState", [x, weight, self.cumulative_sequence_lengths, None, past],
            {"activation": "silu"}, name="conv/VarlenCausalConvWithState", num_outputs=2, domain=MS)
        return y, present

    def recurrence(self, b, q, k, v, decay, beta, past, arch: Architecture):
        la = arch.linear_attention
        declared = tuple(d if isinstance(d, int) else None for d in past.shape)[-2:]
        if declared != (la.value_head_dim, la.key_head_dim):
            raise AssertionError(
                f"paged recurrent state {past.name} declared {past.shape}; GatedDeltaNet needs V-major "
                f"[B, Hv, Dv={la.value_head_dim}, Dk={la.key_head_dim}]"
            )
        attrs = {"update_rule": "gated_delta", "scale": la.key_head_dim**-0.5}
        out, present = b.op_multi(
            "GatedDeltaNet", [q, k, v, self.cumulative_sequence_lengths, decay, beta, past], attrs,
            name="GatedDeltaNet", num_outputs=2, domain=MS)
        return out, present
