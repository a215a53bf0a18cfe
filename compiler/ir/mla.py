"""Multi-head latent attention (MLA), the attention of the `deepseek2` family: DeepSeek-V2/V3 and GLM-4.7-Flash.

transformers' `DeepseekV3Attention` / `Glm4MoeLiteAttention`, per token `x`:

    q            = q_b_proj(rms_norm(q_a_proj(x), eps=latent_norm_eps))    # or q_proj(x) without a q LoRA
    q_nope, q_rope = split per head [qk_nope_head_dim | qk_rope_head_dim]
    c, k_rope    = kv_a_proj_with_mqa(x) split [kv_lora_rank | qk_rope_head_dim]  # k_rope: ONE head for all
    c            = rms_norm(c, eps=latent_norm_eps)
    k_nope, v    = kv_b_proj(c) split per head [qk_nope_head_dim | v_head_dim]
    out          = o_proj(softmax(([q_nope | rope(q_rope)] . [k_nope | rope(k_rope)]) * softmax_scale) v)

mtpc's graphs run the *absorbed* form (llama.cpp's): the cache holds the latent `[rope(k_rope) | c]`
(`latent_dim` wide, one KV head); each head's query is `[rope(q_rope) | q_nope W_UK_h]` (W_UK_h: head h's
k_nope rows of kv_b_proj), the attention's values are the same latent, and head h's output is the
latent part of its result times W_UV_h (its v rows) before o_proj. So an MLA `Architecture` has
`num_key_value_heads == 1` and `head_dim == latent_dim` (what a runtime allocates per cached token), and
its `rope.head_dim` is `qk_rope_head_dim`.

Canonical weights (`weights.store`) keep transformers' names; the rope channels of `q_b_proj` (per head)
and `kv_a_proj_with_mqa` are stored in half-split (NeoX) order: a source whose rope is interleaved
(`rope_interleave`, llama.cpp's `deepseek2`) permutes those rows on read. The dot product is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fields import added


@dataclass(frozen=True)
class MlaDims:
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # The softmax's scale: qk_head_dim ** -0.5, times yarn's mscale ** 2 where the source scales RoPE (DeepSeek-V3).
    softmax_scale: float
    # None: queries come from one `q_proj` (DeepSeek-V2-Lite); else q_a_proj -> norm -> q_b_proj.
    q_lora_rank: int | None = None
    # q_a_layernorm / kv_a_layernorm's epsilon (transformers builds them with its default 1e-6, not rms_norm_eps).
    latent_norm_eps: float = 1e-6
    # The source stores the rope rows interleaved (HF `rope_interleave`): its reader permutes them on read into
    # the canonical half-split order. A fact of the source, read by the source's names, never by graphs.
    source_rope_interleaved: bool = added(False)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """What the cache holds per token: the rotated shared key `[qk_rope_head_dim]` then the latent `[kv_lora_rank]`."""
        return self.qk_rope_head_dim + self.kv_lora_rank

    @property
    def cached_per_token(self) -> int:
        """Elements a layer caches per token: the latent in the K cache and again in the V cache (one head each)."""
        return 2 * self.latent_dim

    def decompressed_per_token(self, heads: int) -> int:
        """Elements per token per layer of the per-head cache the latent replaces: every head's key
        (`qk_head_dim`) and value (`v_head_dim`), as a plain multi-head attention would hold them."""
        return heads * (self.qk_head_dim + self.v_head_dim)

    def summary(self) -> str:
        q = f"q LoRA {self.q_lora_rank}" if self.q_lora_rank else "q_proj"
        return (f"multi-head latent attention ({q}, kv LoRA {self.kv_lora_rank}, per head nope {self.qk_nope_head_dim}"
                f" + rope {self.qk_rope_head_dim}, v {self.v_head_dim}; caches a {self.latent_dim}-wide latent)")
