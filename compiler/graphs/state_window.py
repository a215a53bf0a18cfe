"""Dense `[B, S, X]` sequence ops whose linear-attention state carries a window of per-token states.

The contract (`passes/state_window.py`): past and present are `[W, B, ...]`; the graph reads past
slot W - 1 only, and present slot j holds the state after token T - W + j of the T tokens run,
zero for slots before the first token (j < W - T), as onnxruntime's own `state_window` leaves them.
Built from ops every execution provider runs:

- **conv**: the state after token t is the K - 1 raw inputs ending at t, so the whole window is one
  Gather over `[past slot W-1 | x]` along time (indices clamped at 0, early slots masked to zero);
  the output itself comes from CausalConvWithState on past slot W - 1, as unwindowed.
- **recurrence**: LinearAttention returns only its final state, so the sequence is run as a
  prefix of max(T - W, 0) tokens and then W one-token steps, each step starting from the state the
  one before left. A step whose token lies before the forward's first one gets an empty slice, which
  the op passes through unchanged (checked on onnxruntime 1.32's CPU kernel); the prefix is empty
  whenever T <= W, which every verify is. The outputs concatenate back in token order.

onnxruntime-genai binds past and present to one buffer on CPU (`RecurrentState`, `share_buffers_`),
so every read of a past tensor is a Gather that copies slot W - 1 before anything is written.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from ..ir import Architecture
from .blocks import split_heads
from .builder import GraphBuilder
from .sequence import DenseOps, linear_attention


class WindowedDenseOps(DenseOps):
    def __init__(self, b: GraphBuilder, attention_mask: oir.Value, input_ids: oir.Value, window: int, conv_tail: int):
        super().__init__(b, attention_mask)
        self.window = window
        # Everything here depends only on the forward's token count: built once, shared by every layer.
        with b.scope("state_window"):
            tokens = b.op("Gather", [b.op("Shape", [input_ids], name="Shape"), b.constant(
                "index_1", np.asarray(1, np.int64))], {"axis": 0}, name="tokens")
            # Slot s holds the state after token T - W + s.
            token_of_slot = b.op("Add", [tokens, b.i64("slot_minus_window", np.arange(window) - window)],
                                 name="token_of_slot")
            zero = self.zero = b.i64("zero_1d", [0])
            starts = b.op("Max", [token_of_slot, zero], name="step_starts")
            ends = b.op("Max", [b.op("Add", [token_of_slot, b.i64("one_1d", [1])], name="after_slot"), zero],
                        name="step_ends")
            self.steps = [
                tuple(b.op("Slice", [bounds, b.i64(f"slot_{s}", [s]), b.i64(f"slot_{s + 1}", [s + 1])],
                           name=f"step_{s}/{what}") for what, bounds in (("start", starts), ("end", ends)))
                for s in range(window)
            ]
            self.prefix_end = b.op("Max", [b.op("Sub", [tokens, b.i64("window", [window])], name="before_window"),
                                           zero], name="prefix_end")
            self.sequence_axis = b.i64("axis_1_1d", [1])
            self.last_slot = b.constant("last_slot", np.asarray(window - 1, np.int64))
            # History column c of [past | x] is token c - (K-1); the state after token t is columns t+1 .. t+K-1.
            columns = b.op("Add", [b.op("Unsqueeze", [token_of_slot, b.i64("axis_last", [-1])], name="Unsqueeze"),
                                   b.i64("conv_offsets", np.arange(conv_tail) + 1)], name="conv_columns")
            self.conv_columns = b.op("Max", [columns, zero], name="conv_columns_clamped")  # [W, K-1]
            filled = b.op("Cast", [b.op("GreaterOrEqual", [token_of_slot, zero], name="filled")], {"to": b.io_dtype},
                          name="filled/Cast")  # [W]: 1 where the slot's token is in this forward
            self.masks = {rank: b.op("Reshape", [filled, b.i64(f"mask_shape_{rank}", [window] + [1] * (rank - 1))],
                                     name=f"mask_{rank}d") for rank in (4, 5)}

    def _past_slot(self, b: GraphBuilder, past: oir.Value, name: str) -> oir.Value:
        return b.op("Gather", [past, self.last_slot], {"axis": 0}, name=name)

    def causal_conv(self, b, x, weight, past):
        past_last = self._past_slot(b, past, "conv/past_slot")  # [B, C, K-1]
        y, _ = super().causal_conv(b, x, weight, past_last)
        with b.scope("conv_window"):
            history = b.op("Concat", [past_last, b.op("Transpose", [x], {"perm": [0, 2, 1]}, name="Transpose")],
                           {"axis": 2}, name="history")
            windows = b.op("Gather", [history, self.conv_columns], {"axis": 2}, name="Gather")  # [B, C, W, K-1]
            windows = b.op("Transpose", [windows], {"perm": [2, 0, 1, 3]}, name="slots")  # [W, B, C, K-1]
            present = b.op("Mul", [windows, self.masks[4]], name="masked")
        return y, present

    def recurrence(self, b, q, k, v, decay, beta, past, arch: Architecture):
        la = arch.linear_attention
        q, k, v, decay, beta = self.recurrence_inputs(b, q, k, v, decay, beta, arch)
        inputs = (q, k, v, decay, beta)
        state = self._past_slot(b, past, "recurrent/past_slot")  # [B, Hv, Dk, Dv]
        with b.scope("recurrent_window"):
            prefix = [b.op("Slice", [x, self.zero, self.prefix_end, self.sequence_axis], name=f"prefix/Slice_{i}")
                      for i, x in enumerate(inputs)]
            out, state = linear_attention(b, *prefix[:3], state, *prefix[3:], arch, "prefix/LinearAttention")
            outputs, states = [out], []
            for s, (start, end) in enumerate(self.steps):
                step = [b.op("Slice", [x, start, end, self.sequence_axis], name=f"step_{s}/Slice_{i}")
                        for i, x in enumerate(inputs)]
                out, state = linear_attention(b, *step[:3], state, *step[3:], arch, f"step_{s}/LinearAttention")
                outputs.append(out)
                states.append(b.op("Unsqueeze", [state, self.zero], name=f"step_{s}/Unsqueeze"))
            out = b.op("Concat", outputs, {"axis": 1}, name="outputs")
            slots = b.op("Concat", states, {"axis": 0}, name="slots")  # [W, B, Hv, Dk, Dv]
            present = b.op("Mul", [slots, self.masks[5]], name="masked")
        return split_heads(b, self, out, la.num_value_heads, la.value_head_dim, "out/Reshape"), present
