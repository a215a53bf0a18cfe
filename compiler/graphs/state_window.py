"""Dense `[B, S, X]` sequence ops whose linear-attention state carries a window of per-token states.

The contract (`passes/state_window.py`): past and present are `[W, B, ...]`; the graph reads past
slot W - 1 only, and present slot j holds the state after token T - W + j of the T tokens run.
Slots before the forward's first token (j < W - T) are never read (the runtime crops only to tokens
of the forward): a one-token forward leaves zeros there, a longer one the state it started from
(zeroing them too would cost one more pass over the window).
Built from ops every execution provider runs:

- **conv**: the state after token t is the K - 1 raw inputs ending at t, so the whole window is one
  Gather over `[past slot W-1 | x]` along time; the output itself comes from CausalConvWithState on
  past slot W - 1, as unwindowed.
- **recurrence**: LinearAttention returns only its final state, so the sequence runs as W calls,
  each from the state the one before left: slot 0's runs every token up to its own, the others one
  token each; one Split per input cuts the W pieces. A slot whose token lies before the forward's
  first one gets an empty piece, which the op passes through unchanged (checked on onnxruntime
  1.32's CPU kernel). The outputs concatenate back in token order. A one-token forward (a decode
  step) takes an If branch instead: one call, its state padded into slot W - 1 with zeros below,
  one write of the window where the general form copies the state once per slot and then again.

onnxruntime-genai binds past and present to one buffer on CPU (`RecurrentState`, `share_buffers_`),
so every read of a past tensor is a Gather that copies slot W - 1 before anything is written.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir

from .blocks import split_heads
from .recurrence import Recurrence
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
            # Slot s holds the state after token T - W + s; before the forward's first token, the state it started from.
            token_of_slot = b.op("Max", [b.op("Add", [tokens, b.i64("slot_minus_window", np.arange(window) - window)],
                                              name="token_of_slot"), b.i64("minus_one_1d", [-1])], name="token_or_before")
            zero = self.zero = b.i64("zero_1d", [0])
            step_tokens = b.op("Cast", [b.op("GreaterOrEqual", [token_of_slot, zero], name="filled")],
                               {"to": oir.DataType.INT64}, name="step_tokens")  # [W]: 1 where the slot's token is in
            # Slot 0's call also runs the tokens before it: max(T - W + 1, 0) of them (none when T < W).
            first = b.op("Max", [b.op("Sub", [tokens, b.i64("window_minus_one", [window - 1])], name="through_slot_0"),
                                 zero], name="first_tokens")
            rest = b.op("Slice", [step_tokens, b.i64("one_1d", [1]), b.i64("window_1d", [window])], name="rest")
            self.pieces = b.op("Concat", [first, rest], {"axis": 0}, name="pieces")  # [W], sums to T
            self.last_slot = b.constant("last_slot", np.asarray(window - 1, np.int64))
            self.one_token = b.op("Equal", [tokens, b.constant("one", np.asarray(1, np.int64))], name="one_token")
            # History column c of [past | x] is token c - (K-1); the state after token t is columns t+1 .. t+K-1.
            self.conv_columns = b.op("Add", [b.op("Unsqueeze", [token_of_slot, b.i64("axis_last", [-1])],
                                                  name="Unsqueeze"), b.i64("conv_offsets", np.arange(conv_tail) + 1)],
                                     name="conv_columns")  # [W, K-1]

    def _past_slot(self, b: GraphBuilder, past: oir.Value, name: str) -> oir.Value:
        return b.op("Gather", [past, self.last_slot], {"axis": 0}, name=name)

    def causal_conv(self, b, x, weight, past, bias=None):
        past_last = self._past_slot(b, past, "conv/past_slot")  # [B, C, K-1]
        y, _, channels_first = self.channels_first_conv(b, x, weight, past_last, bias=bias)
        with b.scope("conv_window"):
            history = b.op("Concat", [past_last, channels_first], {"axis": 2}, name="history")
            windows = b.op("Gather", [history, self.conv_columns], {"axis": 2}, name="Gather")  # [B, C, W, K-1]
            present = b.op("Transpose", [windows], {"perm": [2, 0, 1, 3]}, name="slots")  # [W, B, C, K-1]
        return y, present

    def recurrence(self, b, q, k, v, decay, beta, past, rule: Recurrence):
        inputs = self.recurrence_inputs(b, q, k, v, decay, beta, rule)
        state = self._past_slot(b, past, "recurrent/past_slot")  # [B, Hv, Dk, Dv]
        with b.scope("recurrent_window"):
            branches = {"then_branch": b.branch("one_token", lambda: self._one_token(b, inputs, state, rule)),
                        "else_branch": b.branch("tokens", lambda: self._tokens(b, inputs, state, rule))}
            out, present = b.op_multi("If", [self.one_token], branches, name="If", num_outputs=2)
        return split_heads(b, self, out, rule.value_heads, rule.value_dim, "out/Reshape"), present

    def _one_token(self, b, inputs, state, rule):
        """A decode step: one LinearAttention call, its state in slot W - 1 and zeros before it (never read), one
        write of the window where the general form would copy the state once per slot and then again."""
        q, k, v, decay, beta = inputs
        out, state = linear_attention(b, q, k, v, state, decay, beta, rule, "one_token/LinearAttention")
        rank = 5
        pads = b.i64("one_token_pads", [self.window - 1] + [0] * (2 * rank - 1))
        present = b.op("Pad", [b.op("Unsqueeze", [state, self.zero], name="one_token/Unsqueeze"), pads],
                       {"mode": "constant"}, name="one_token/Pad")
        return out, present

    def _tokens(self, b, inputs, state, rule):
        """Any T: one call per slot (the first also runs the tokens before it), the states concatenated."""
        # pieces[i][s]: the tokens slot s's call runs (slot 0: all up to its own; the others: theirs, or none).
        pieces = [None if x is None else b.op_multi("Split", [x, self.pieces], {"axis": 1}, name=f"Split_{i}",
                                                    num_outputs=self.window)
                  for i, x in enumerate(inputs)]
        outputs, states = [], []
        for s in range(self.window):
            q, k, v, decay, beta = (None if p is None else p[s] for p in pieces)
            out, state = linear_attention(b, q, k, v, state, decay, beta, rule, f"step_{s}/LinearAttention")
            outputs.append(out)
            states.append(b.op("Unsqueeze", [state, self.zero], name=f"step_{s}/Unsqueeze"))
        out = b.op("Concat", outputs, {"axis": 1}, name="outputs")
        return out, b.op("Concat", states, {"axis": 0}, name="slots")  # [W, B, Hv, Dk, Dv]


class FusedWindowOps(DenseOps):
    """The window as the kernels' own `state_window` attribute (the 0.18.0 builder's CUDA form): each op reads
    past slot W - 1 and writes all W slots itself, right-aligned, slots before the forward's first token zero
    (onnxruntime 1.32's contract). Only the CUDA kernels implement it (`profiles/kernels.py`)."""

    def __init__(self, b: GraphBuilder, attention_mask: oir.Value, window: int):
        super().__init__(b, attention_mask)
        self.window = window

    def causal_conv(self, b, x, weight, past, bias=None):
        y, present, _ = self.channels_first_conv(b, x, weight, past, {"state_window": self.window}, bias=bias)
        return y, present

    def recurrence(self, b, q, k, v, decay, beta, past, rule: Recurrence):
        q, k, v, decay, beta = self.recurrence_inputs(b, q, k, v, decay, beta, rule)
        out, present = linear_attention(b, q, k, v, past, decay, beta, rule, "LinearAttention", self.window)
        return split_heads(b, self, out, rule.value_heads, rule.value_dim, "out/Reshape"), present
