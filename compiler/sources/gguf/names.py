"""GGUF tensor names <-> canonical names, as data, per GGUF architecture.

Each rule pairs a GGUF name (relative to `blk.{i}.` for block tensors) with a
canonical name (relative to `layers.{i}.` / `mtp.layers.{j}.`, see
`mtpc.weights`), the tensor's GGUF numpy shape in symbolic dimensions, and the
value transform the llama.cpp converter baked in that the importer must undo.

Symbolic dimensions (resolved by `mtpc.sources.gguf.reader` from the metadata):
  H hidden size, I intermediate size, V vocab size, Q `2 * heads * head_dim`
  (query and gate, interleaved per head), O `heads * head_dim`, KV
  `kv_heads * head_dim`, HD head dim, QKV the linear-attention conv width
  `2 * key_dim + value_dim`, VD value dim, HV value heads, DV value head dim,
  CK conv kernel, H2 `2 * H`; NH heads, and a sliding block's own OS `heads * head_dim` and NHS heads (step35).

MoE blocks (qwen35moe) add E experts, EI expert FFN width, SI shared-expert width and ONE (1).
Multi-head latent attention (deepseek2, `mla_dims`) adds N heads, QR q LoRA rank, QB `N * (nope + rope)`,
R kv LoRA rank, KVA `R + rope`, NOPE, VH value head dim, KVB `N * (NOPE + VH)` and OV `N * VH`.

A new architecture adds its own `GGUFNames` entry in its module (`glm4moe.py`, `qwen3next.py`), registered in
`layout.ARCHITECTURES`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Callable

from ...ir import MlaDims, MoeDims


class Transform(str, enum.Enum):
    """How a stored tensor differs from its canonical value, beyond GGUF's reversed ggml dims.

    Offset norms (`w + 1` baked in) and `ssm_a = -exp(A_log)` already equal the
    canonical effective scale and decay scale, so they need no transform.
    """

    NONE = "none"
    # The converter stores value heads *tiled* (head p = j*n_k + g holds grouped head g*r + j);
    # these restore grouped order on the axis / span that is indexed by value head.
    VALUE_ROWS = "value_rows"  # every row belongs to a value head: in_proj_z/a/b, dt_bias, decay_scale
    VALUE_ROWS_AFTER_KEYS = "value_rows_after_keys"  # rows [2*key_dim:] of in_proj_qkv
    VALUE_COLUMNS = "value_columns"  # columns of out_proj
    # The 2-D conv weight `[C, K]` becomes `[C, 1, K]`, its value channels regrouped as above.
    CONV1D = "conv1d"
    # qwen3next's fused `ssm_ba` `[2 * HV, H]`: per key-head group `[b (r rows) | a (r rows)]` (r = HV / HK).
    BETA_ROWS = "beta_rows"
    ALPHA_ROWS = "alpha_rows"
    # MLA (deepseek2): llama.cpp rotates interleaved pairs (ROPE_TYPE_NORM) on HF's own rows; canonical rope
    # rows are half-split (`ir/mla.py`). Per head `[nope | rope]` (q_b_proj / q_proj), or the last rope rows
    # (kv_a_proj_with_mqa's `[latent | k_rope]`): whole rows move, so block forms stay exact.
    ROPE_ROWS_PER_HEAD = "rope_rows_per_head"
    ROPE_ROWS_LAST = "rope_rows_last"
    # kv_b_proj `[N * (NOPE + VH), R]` assembled from the converter's `attn_k_b` `[N, R, NOPE]` (k half, transposed)
    # and its `Rule.parts` `attn_v_b` `[N, VH, R]`; read as float (k_b's blocks run along NOPE, not R).
    KV_B_SPLIT = "kv_b_split"


@dataclass(frozen=True)
class Rule:
    gguf: str
    canonical: str
    shape: tuple[str, ...]  # GGUF numpy shape (reverse of ggml `ne`), symbolic
    transform: Transform = Transform.NONE
    # Further GGUF tensors (name, symbolic shape) the canonical tensor is assembled from (deepseek2's attn_v_b).
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class GGUFNames:
    """Where each canonical tensor lives in one GGUF architecture."""

    family: str  # Architecture.family of the IR
    global_required: tuple[Rule, ...]
    # The LM head: absent means tied to the embedding.
    output: Rule
    every_block: tuple[Rule, ...]
    full_attention: tuple[Rule, ...]
    linear_attention: tuple[Rule, ...]
    ffn: tuple[Rule, ...]
    # The MTP ("nextn") tensors that sit in the first head block, canonical names absolute.
    nextn_required: tuple[Rule, ...]
    # Head-own embedding / LM head; absent means the head shares the trunk's.
    nextn_optional: tuple[Rule, ...]
    # Head tensors some converters leave out, each with the trunk tensor (GGUF name) that stands in.
    nextn_fallback: tuple[tuple[Rule, str], ...] = ()
    # Attention tensors a model has or not, by the `Architecture` flag that says so (GLM's biases, qk-norm).
    optional_attention: tuple[tuple[str, tuple[Rule, ...]], ...] = ()
    # The FFN of the first `moe.dense_layers` blocks of a model whose other blocks are sparse (GLM-4.5).
    dense_ffn: tuple[Rule, ...] = ()
    # Attention tensors whose presence in block 0 sets an `Architecture` flag (GGUF has no key for them).
    flag_tensors: tuple[tuple[str, str], ...] = ()
    # Whether the converter tiled the value heads (Qwen3.5's `_LinearAttentionVReorderBase`); qwen3next's
    # converter keeps HF's grouped order, so its VALUE_* transforms move nothing.
    tiled_value_heads: bool = True
    # Positions as MRoPE rows (Qwen3.5) or one per token.
    position_rows: bool = True
    # (architecture, the file's tensor names) -> the table this file is read with, for a family whose tensors
    # vary with its dims or converter version (deepseek2: q LoRA or not, split or legacy kv_b, selection bias).
    variant: Callable[..., "GGUFNames"] | None = None
    # A sliding-window block's attention tensors where its heads differ from a full block's (step35); empty: as full.
    sliding_attention: tuple[Rule, ...] = ()


_N = Transform

QWEN35 = GGUFNames(
    family="qwen35",
    global_required=(
        Rule("token_embd.weight", "embed_tokens.weight", ("V", "H")),
        Rule("output_norm.weight", "norm.weight", ("H",)),
    ),
    output=Rule("output.weight", "lm_head.weight", ("V", "H")),
    every_block=(
        Rule("attn_norm.weight", "input_layernorm.weight", ("H",)),
        # GGUF's post_attention_norm is the pre-FFN norm.
        Rule("post_attention_norm.weight", "post_attention_layernorm.weight", ("H",)),
    ),
    full_attention=(
        Rule("attn_q.weight", "self_attn.q_proj.weight", ("Q", "H")),
        Rule("attn_k.weight", "self_attn.k_proj.weight", ("KV", "H")),
        Rule("attn_v.weight", "self_attn.v_proj.weight", ("KV", "H")),
        Rule("attn_output.weight", "self_attn.o_proj.weight", ("H", "O")),
        Rule("attn_q_norm.weight", "self_attn.q_norm.weight", ("HD",)),
        Rule("attn_k_norm.weight", "self_attn.k_norm.weight", ("HD",)),
    ),
    linear_attention=(
        Rule("attn_qkv.weight", "linear_attn.in_proj_qkv.weight", ("QKV", "H"), _N.VALUE_ROWS_AFTER_KEYS),
        Rule("attn_gate.weight", "linear_attn.in_proj_z.weight", ("VD", "H"), _N.VALUE_ROWS),
        Rule("ssm_beta.weight", "linear_attn.in_proj_b.weight", ("HV", "H"), _N.VALUE_ROWS),
        Rule("ssm_alpha.weight", "linear_attn.in_proj_a.weight", ("HV", "H"), _N.VALUE_ROWS),
        Rule("ssm_conv1d.weight", "linear_attn.conv1d.weight", ("QKV", "CK"), _N.CONV1D),
        Rule("ssm_dt.bias", "linear_attn.dt_bias", ("HV",), _N.VALUE_ROWS),
        Rule("ssm_a", "linear_attn.decay_scale", ("HV",), _N.VALUE_ROWS),
        # The gated norm is per value-head channel ([DV]), shared by all heads: no regrouping.
        Rule("ssm_norm.weight", "linear_attn.norm.weight", ("DV",)),
        Rule("ssm_out.weight", "linear_attn.out_proj.weight", ("H", "VD"), _N.VALUE_COLUMNS),
    ),
    ffn=(
        Rule("ffn_gate.weight", "mlp.gate_proj.weight", ("I", "H")),
        Rule("ffn_up.weight", "mlp.up_proj.weight", ("I", "H")),
        Rule("ffn_down.weight", "mlp.down_proj.weight", ("H", "I")),
    ),
    nextn_required=(
        # Concat order is [embedding | hidden]: ggml ne = {2H, H}.
        Rule("nextn.eh_proj.weight", "mtp.fc.weight", ("H", "H2")),
        Rule("nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight", ("H",)),
        Rule("nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight", ("H",)),
    ),
    nextn_optional=(
        Rule("nextn.embed_tokens.weight", "mtp.embed_tokens.weight", ("V", "H")),
        Rule("nextn.shared_head_head.weight", "mtp.lm_head.weight", ("V", "H")),
    ),
    # The head's final norm; without it the trunk's final norm serves, as mobius reads such files.
    nextn_fallback=((Rule("nextn.shared_head_norm.weight", "mtp.norm.weight", ("H",)), "output_norm.weight"),),
)

# The routed experts, stacked per projection ([E, I, H] / [E, H, I] in numpy order), and the shared
# expert, as llama.cpp's converter writes them for both MoE families.
EXPERTS = (
    Rule("ffn_gate_exps.weight", "mlp.experts.gate_proj.weight", ("E", "EI", "H")),
    Rule("ffn_up_exps.weight", "mlp.experts.up_proj.weight", ("E", "EI", "H")),
    Rule("ffn_down_exps.weight", "mlp.experts.down_proj.weight", ("E", "H", "EI")),
    Rule("ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", ("SI", "H")),
    Rule("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", ("SI", "H")),
    Rule("ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", ("H", "SI")),
)

# Qwen3.5-MoE: the same blocks with the sparse FFN in place of the MLP, the nextn block's included; the
# shared expert's gate is a [1, H] linear.
QWEN35MOE = replace(
    QWEN35,
    family="qwen35moe",
    ffn=(
        Rule("ffn_gate_inp.weight", "mlp.gate.weight", ("E", "H")),
        *EXPERTS,
        Rule("ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", ("ONE", "H")),
    ),
)

def attention_rules(names: GGUFNames, arch, sliding: bool = False) -> tuple[Rule, ...]:
    """An attention block's tensors (`sliding`: a sliding-window block's): the family's, and those of the optional
    parts `arch` has."""
    own = names.sliding_attention if sliding and names.sliding_attention else names.full_attention
    return own + tuple(r for flag, rules in names.optional_attention if getattr(arch, flag) for r in rules)


def ffn_rules(names: GGUFNames, arch, block: int | None) -> tuple[Rule, ...]:
    """Block `block`'s FFN tensors (None: the MTP block, sparse in a MoE family)."""
    return names.dense_ffn if names.dense_ffn and not arch.is_sparse(block) else names.ffn


def moe_dims(moe: MoeDims | None) -> dict[str, int]:
    """The MoE blocks' symbolic dimensions (none for a dense model)."""
    if moe is None:
        return {}
    return {"E": moe.num_experts, "EI": moe.expert_intermediate_size, "SI": moe.shared_expert_intermediate_size,
            "ONE": 1}


def mla_dims(mla: MlaDims | None, heads: int) -> dict[str, int]:
    """Multi-head latent attention's symbolic dimensions (none without it)."""
    if mla is None:
        return {}
    return {"N": heads, "QR": mla.q_lora_rank or 0, "QB": heads * mla.qk_head_dim, "R": mla.kv_lora_rank,
            "KVA": mla.kv_lora_rank + mla.qk_rope_head_dim, "NOPE": mla.qk_nope_head_dim, "VH": mla.v_head_dim,
            "KVB": heads * (mla.qk_nope_head_dim + mla.v_head_dim), "OV": heads * mla.v_head_dim}
