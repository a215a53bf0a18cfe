"""How one attention layer attends: its own heads, head widths, rope and window (sliding-window families).

Most families attend alike in every layer, with the `Architecture`'s heads, `head_dim` and `rope`. Step-3.5 /
3.7-Flash and MiMo-V2-Flash do not: their sliding-window layers (`LayerKind.SLIDING_ATTENTION`, their MTP
layers among them) have heads and a rope of their own, and MiMo adds learnable sinks and a value head narrower
than the query / key head:

- Step-3.5-Flash (transformers `Step3p7Attention`): full layers 64 query heads, rope over half of the 128-wide
  head at theta 5e6; sliding layers 96 query heads (`attention_other_setting`), rope over all of it at 1e4, a
  512-token window; 8 KV heads in both;
- MiMo-V2-Flash (`MiMoV2FlashAttention`): q/k heads 192 wide, value heads 128; sliding layers twice the KV heads
  of full layers, a 128 + 1 token window and one sink logit per query head.

`Architecture.layer_attention(kind)` resolves a layer kind into a `LayerAttention`: what the graphs, the numpy
reference and the I/O contracts all read. The window counts the tokens a query attends to, **its own included**
(onnxruntime's `GroupQueryAttention` `local_window_size`, transformers' `sliding_window_overlay`: `kv > q - W`);
a source converts its checkpoint's convention into it (MiMo's `sliding_window_size` is the tokens before the
query: W = that + 1). A sink is a logit per query head appended to each softmax row and dropped after it
(transformers' `s_aux`, onnxruntime's `head_sink`): it takes probability from the real keys, never adds a value.

The KV cache keeps one head width for keys and values (onnxruntime-genai allocates K and V of a layer alike, and
`GroupQueryAttention` wants "value ... same hidden size as key"), so a value head narrower than the key head is
cached zero-padded to the key's width: `cached_head_dim`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .rope import Rope


@dataclass(frozen=True)
class LayerAttention:
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int  # queries and keys
    value_head_dim: int
    rope: Rope  # this kind's theta and rotary share (`rope.head_dim` is `head_dim`)
    # Tokens a query attends to, its own included; None: every earlier token (full attention).
    window: int | None = None
    # One learnable logit per query head joins each softmax (`self_attn.sinks`, `[num_attention_heads]`).
    sinks: bool = False

    def __post_init__(self):
        if self.value_head_dim > self.head_dim:
            raise ValueError(f"a value head ({self.value_head_dim}) wider than the key head ({self.head_dim}) "
                             "has no cache layout here (values are cached padded to the key's width)")
        if self.window is not None and self.window < 1:
            raise ValueError(f"a sliding window of {self.window} tokens attends to nothing")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{self.num_attention_heads} query heads do not share {self.num_key_value_heads} KV heads evenly")

    @property
    def softmax_scale(self) -> float:
        return self.head_dim**-0.5

    @property
    def cached_head_dim(self) -> int:
        """The width of one cached key and of one cached value (values zero-padded to it)."""
        return self.head_dim

    def cached_tokens(self, context: int) -> int:
        """Tokens a cache holding only what this layer can still attend to keeps at `context` tokens."""
        return context if self.window is None else min(context, self.window)

    def summary(self) -> str:
        """e.g. "96 heads, 8 kv heads, head dim 128, rotary 128 at theta 10000, window 512"."""
        parts = [f"{self.num_attention_heads} heads, {self.num_key_value_heads} kv heads, head dim {self.head_dim}"]
        if self.value_head_dim != self.head_dim:
            parts[0] += f" (values {self.value_head_dim})"
        parts.append(f"rotary {self.rope.rotary_dim} at theta {self.rope.theta:g}")
        if self.window is not None:
            parts.append(f"window {self.window}")
        if self.sinks:
            parts.append("sinks")
        return ", ".join(parts)
