"""Token-layout-dependent ops for dense `[B, S, X]` graphs (CPU-runnable); `layouts.py` chooses among layouts.

Dense graphs use GroupQueryAttention with BNSH past/present KV (rotary applied
before it, so `do_rotary=0`), CausalConvWithState and LinearAttention with
`[B, Hv, Dk, Dv]` state. GQA's bookkeeping comes from `attention_mask`:
`seqlens_k = sum(mask) - 1`, `total_sequence_length = mask width`.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import Architecture, LayerAttention
from .attention import WindowMask
from .blocks import SequenceOps, merge_heads, split_heads
from .builder import MS, GraphBuilder
from .latent_attention import LatentMask, latent_attention


class DenseOps:
    lead = 2

    def take_state_updates(self):
        """Dense graphs expose no compact state updates."""
        return None, None

    def __init__(self, b: GraphBuilder, attention_mask: oir.Value):
        with b.scope("attention_mask"):
            total = b.op("ReduceSum", [attention_mask, b.i64("axis_1", [1])], {"keepdims": 0}, name="ReduceSum")
            seqlens = b.op("Sub", [total, b.i64("one", [1])], name="Sub")
            self.seqlens_k = b.op("Cast", [seqlens], {"to": oir.DataType.INT32}, name="seqlens_k")
            width = b.op("Gather", [b.op("Shape", [attention_mask], name="Shape"), b.constant(
                "index_1", np.asarray(1, np.int64))], {"axis": 0}, name="width")
            self.total_length = b.op("Cast", [width], {"to": oir.DataType.INT32}, name="total_sequence_length")
        self.latent_mask = LatentMask(attention_mask)  # built only if a layer runs the plain-op latent attention
        self.window_mask = WindowMask(attention_mask)  # built only if a sliding layer runs in plain ops (attention.py)

    def attention(self, b, q, k, v, past_key, past_value, arch: Architecture):
        attrs = {"num_heads": arch.num_attention_heads, "kv_num_heads": arch.num_key_value_heads,
                 "do_rotary": 0, "scale": arch.softmax_scale}
        out, present_key, present_value = b.op_multi(
            "GroupQueryAttention", [q, k, v, past_key, past_value, self.seqlens_k, self.total_length], attrs,
            name="GroupQueryAttention", num_outputs=3, domain=MS)
        return out, present_key, present_value

    def layer_attention(self, b, q, k, v, past_key, past_value, layer: LayerAttention, sinks=None):
        """GroupQueryAttention with a layer's own heads, window (`local_window_size`) and sinks (`head_sink`)."""
        attrs = {"num_heads": layer.num_attention_heads, "kv_num_heads": layer.num_key_value_heads, "do_rotary": 0,
                 "scale": layer.softmax_scale}
        if layer.window is not None:
            attrs["local_window_size"] = layer.window
        inputs = [q, k, v, past_key, past_value, self.seqlens_k, self.total_length]
        if sinks is not None:  # inputs 7-10 (cos/sin caches, position ids, attention bias) stay empty
            inputs += [None] * 4 + [sinks]
        out, present_key, present_value = b.op_multi("GroupQueryAttention", inputs, attrs, name="GroupQueryAttention",
                                                     num_outputs=3, domain=MS)
        return out, present_key, present_value

    def latent_attention(self, b, query, latent, past_key, past_value, arch: Architecture):
        """MLA's absorbed attention over its one latent head in plain ops (`latent_attention.py`), same I/O."""
        return latent_attention(b, self.latent_mask, query, latent, past_key, past_value, arch)

    def causal_conv(self, b, x, weight, past):
        y, present, _ = self.channels_first_conv(b, x, weight, past)
        return y, present

    def channels_first_conv(self, b, x, weight, past, attrs: dict | None = None):
        """(y `[B, S, C]`, present state, x as the op reads it: `[B, C, S]`); `attrs` adds to the op's."""
        channels_first = b.op("Transpose", [x], {"perm": [0, 2, 1]}, name="conv/Transpose_in")
        y, present = b.op_multi("CausalConvWithState", [channels_first, weight, None, past],
                                {"activation": "silu", **(attrs or {})}, name="conv/CausalConvWithState",
                                num_outputs=2, domain=MS)
        return b.op("Transpose", [y], {"perm": [0, 2, 1]}, name="conv/Transpose_out"), present, channels_first

    def recurrence(self, b, q, k, v, decay, beta, past, arch: Architecture):
        la = arch.linear_attention
        q, k, v, decay, beta = self.recurrence_inputs(b, q, k, v, decay, beta, arch)
        out, present = linear_attention(b, q, k, v, past, decay, beta, arch, "LinearAttention")
        return split_heads(b, self, out, la.num_value_heads, la.value_head_dim, "out/Reshape"), present

    def recurrence_inputs(self, b, q, k, v, decay, beta, arch: Architecture):
        """q / k with their heads merged, and the gates in the op's dtype (the state's)."""
        la = arch.linear_attention
        q = merge_heads(b, self, q, la.key_dim, "q/merge")
        k = merge_heads(b, self, k, la.key_dim, "k/merge")
        if b.io_dtype != oir.DataType.FLOAT:
            decay = b.op("Cast", [decay], {"to": b.io_dtype}, name="decay/Cast")
            beta = b.op("Cast", [beta], {"to": b.io_dtype}, name="beta/Cast")
        return q, k, v, decay, beta


def linear_attention(b: GraphBuilder, q, k, v, past, decay, beta, arch: Architecture, name: str,
                     state_window: int = 0):
    """com.microsoft LinearAttention (gated delta rule) over `[B, S, X]` -> (output, present state); with a
    `state_window` W the kernel's own window: past and present `[W, B, ...]` (CUDA kernels only)."""
    la = arch.linear_attention
    # q/k heads < value heads: value head j reads key head j // (Hv / Hk) (grouped), as the weights are stored.
    attrs = {"q_num_heads": la.num_key_heads, "kv_num_heads": la.num_value_heads,
             "update_rule": "gated_delta", "scale": la.key_head_dim**-0.5}
    if state_window:
        attrs["state_window"] = state_window
    out, present = b.op_multi("LinearAttention", [q, k, v, past, decay, beta], attrs, name=name, num_outputs=2,
                              domain=MS)
    return out, present
