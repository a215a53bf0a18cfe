"""Nemotron-H MoE GGUF files (`nemotron_h_moe`, as llama.cpp's converter writes them: conversion/nemotron.py
`NemotronHModel`, read by its src/models/nemotron-h.cpp and nemotron-h-moe.cpp) -> Architecture and tensor names.

Which block is what, as llama.cpp's loader tells it (no key lists the layout): a block with a nonzero
`feed_forward_length` is the MoE layer, one with nonzero `attention.head_count_kv` attention, any other Mamba2
(`ssm.inner_size` = heads x head dim, `ssm.time_step_rank` = heads, `ssm.state_size`, `ssm.group_count`,
`ssm.conv_kernel`; the conv's bias when its tensor is there). The MoE block is GLM's routing (`grouped_moe`:
sigmoid, `exp_probs_b`, groups, norm, scale) over relu² experts, the shared expert `expert_shared_feed_forward_length`
wide, LatentMoE when `moe_latent_size` is written. `nextn_predict_layers` MTP blocks follow the trunk, each one
block holding both sub-blocks (conversion/nemotron.py `_MTP_SPECIAL_RENAMES`): `attn_norm` + attention, then
`post_attention_norm` + the MoE block, `nextn.shared_head_norm` its final norm; `mtpc` reads it as the canonical head
block, as the HF reader does.

What the converter did that is undone or left aside (decided and tested: docs/families/nemotron_h.md):
- q and k rows are permuted per head for RoPE (`LlamaModel.permute`, interleaved pairs): Nemotron-H has no positional
  encoding, so the permutation changes no dot product, but it is undone (`ROPE_ROWS_PER_HEAD` over the whole head)
  so the file reads as the release;
- `rope.dimension_count` and a 1M `context_length` are written though nothing rotates: the rope key is not read, the
  context length is (nothing limits it but memory);
- `ssm_a` is `-exp(A_log)` already, `ssm_a` / `ssm_d` are `[H, 1]` and `ssm_norm` `[G, H*P/G]` (flattened back),
  the conv `[C, K]`; norms are plain scales.
"""

from __future__ import annotations

from dataclasses import replace

from ...util.diagnostics import SourceError
from ...ir import Architecture, HeadLayout, LayerKind, Mamba2Dims, Rope
from ...ir.moe import RELU2, SIGMOID
from .constants import Keys
from .glm4moe import ROUTED_FFN
from .metadata import Metadata, _float32, tensor_shapes, token_ids, trunk_blocks
from .names import QWEN35, GGUFNames, Rule, Transform
from .routed_experts import grouped_moe

_N = Transform

MAMBA2 = (
    Rule("ssm_in.weight", "mamba.in_proj.weight", ("MIN", "H")),
    Rule("ssm_conv1d.weight", "mamba.conv1d.weight", ("MC", "CK"), _N.CONV1D),
    Rule("ssm_dt.bias", "mamba.dt_bias", ("MH",)),
    Rule("ssm_a", "mamba.decay_scale", ("MH", "ONE"), _N.FLATTEN),
    Rule("ssm_d", "mamba.D", ("MH", "ONE"), _N.FLATTEN),
    Rule("ssm_norm.weight", "mamba.norm.weight", ("MG", "MGW"), _N.FLATTEN),
    Rule("ssm_out.weight", "mamba.out_proj.weight", ("H", "MI")),
)
CONV_BIAS = Rule("ssm_conv1d.bias", "mamba.conv1d.bias", ("MC",))
ATTENTION = (
    Rule("attn_q.weight", "self_attn.q_proj.weight", ("O", "H"), _N.ROPE_ROWS_PER_HEAD),
    Rule("attn_k.weight", "self_attn.k_proj.weight", ("KV", "H"), _N.ROPE_ROWS_PER_HEAD),
    Rule("attn_v.weight", "self_attn.v_proj.weight", ("KV", "H")),
    Rule("attn_output.weight", "self_attn.o_proj.weight", ("H", "O")),
)
MOE = (
    *ROUTED_FFN[:2],  # the router and its selection bias
    Rule("ffn_up_exps.weight", "mlp.experts.up_proj.weight", ("E", "EI", "MW")),
    Rule("ffn_down_exps.weight", "mlp.experts.down_proj.weight", ("E", "MW", "EI")),
    Rule("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", ("SI", "H")),
    Rule("ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", ("H", "SI")),
)
LATENT = (
    Rule("ffn_latent_down.weight", "mlp.fc1_latent_proj.weight", ("LAT", "H")),
    Rule("ffn_latent_up.weight", "mlp.fc2_latent_proj.weight", ("H", "LAT")),
)
NORM = QWEN35.every_block[0]  # attn_norm: each sub-block's norm
POST_NORM = QWEN35.every_block[1]  # post_attention_norm: the MTP block's MoE sub-block's


def blocks(names: GGUFNames, arch: Architecture, kind: LayerKind, block: int | None) -> tuple[Rule, ...]:
    """A block's tensors (`block` None: the MTP block, attention then MoE)."""
    moe = MOE + (LATENT if arch.moe is not None and arch.moe.latent_size else ())
    if block is None:
        return (NORM, *ATTENTION, POST_NORM, *moe)
    if kind is LayerKind.MAMBA2:
        return (NORM, *MAMBA2, *((CONV_BIAS,) if arch.mamba is not None and arch.mamba.conv_bias else ()))
    return (NORM, *(ATTENTION if kind is LayerKind.FULL_ATTENTION else moe))


def dims(arch: Architecture) -> dict[str, int]:
    m, moe = arch.mamba, arch.moe
    out = {"MW": moe.latent_size or arch.hidden_size, "LAT": moe.latent_size} if moe is not None else {}
    if m is not None:
        out.update(MIN=m.in_proj_rows, MC=m.conv_dim, MH=m.num_heads, MG=m.num_groups, MGW=m.inner_size // m.num_groups,
                   MI=m.inner_size, CK=m.conv_kernel, ONE=1)
    return out


def architecture(meta: Metadata, names: GGUFNames) -> tuple[Architecture, int]:
    """The architecture with `mtp_num_layers` as declared (`layout` judges the head) and the trunk size."""
    _, nextn, n_main = trunk_blocks(meta)
    ffn, kv = (_per_block(meta, key, n_main) for key in (Keys.LLM.FEED_FORWARD_LENGTH, Keys.Attention.HEAD_COUNT_KV))
    kinds = tuple(LayerKind.FEED_FORWARD if ffn[i] else LayerKind.FULL_ATTENTION if kv[i] else LayerKind.MAMBA2
                  for i in range(n_main))
    shapes = tensor_shapes(meta.header)
    embd = shapes.get("token_embd.weight")
    if embd is None:
        raise SourceError(f"{meta.path}: GGUF tensor token_embd.weight is missing")
    head_dim = meta.positive(Keys.Attention.KEY_LENGTH)
    latent = int(meta.get(Keys.LLM.MOE_LATENT_SIZE, 0, required=False) or 0)
    moe = replace(grouped_moe(meta, n_main, scoring=SIGMOID, selection_bias=True, shared_default=1,
                              block="Nemotron-H's sparse block with its shared expert"),
                  shared_expert_intermediate_size=meta.positive(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH),
                  expert_activation=RELU2, latent_size=latent)
    eps = meta.get(Keys.Attention.LAYERNORM_RMS_EPS, None, required=False)
    arch = Architecture(
        family=names.family,
        hidden_size=int(meta.get(Keys.LLM.EMBEDDING_LENGTH)),
        intermediate_size=moe.expert_intermediate_size,
        num_attention_heads=meta.uniform(Keys.Attention.HEAD_COUNT),
        num_key_value_heads=meta.uniform(Keys.Attention.HEAD_COUNT_KV),
        head_dim=head_dim,
        vocab_size=int(embd[0]),
        layer_kinds=kinds,
        rms_norm_eps=_float32(meta.get(Keys.Attention.LAYERNORM_EPS) if eps is None else eps),
        # No positional encoding: the converter's rope.dimension_count describes nothing that rotates.
        rope=Rope(10000.0, 0.0, head_dim, position_rows=False),
        context_length=int(meta.get(Keys.LLM.CONTEXT_LENGTH)),
        tokens=token_ids(meta),
        tie_word_embeddings="output.weight" not in shapes,
        mtp_num_layers=nextn,
        moe=moe,
        head_layout=HeadLayout.SUB_BLOCKS,
        attention_output_gate=False,
        qk_norm=False,
        mamba=_mamba(meta, kinds, shapes) if LayerKind.MAMBA2 in kinds else None,
        separate_ffn_layers=True,
    )
    return arch, n_main


def _per_block(meta: Metadata, key: str, n_main: int) -> list[int]:
    value = meta.get(key)
    values = [int(v) for v in value] if isinstance(value, list) else [int(value)] * n_main
    if len(values) < n_main:
        raise SourceError(f"{meta.path}: {key.format(arch=meta.arch)} lists {len(values)} blocks, expected {n_main}")
    return values[:n_main]


def _mamba(meta: Metadata, kinds, shapes) -> Mamba2Dims:
    heads, inner = meta.positive(Keys.SSM.TIME_STEP_RANK), meta.positive(Keys.SSM.INNER_SIZE)
    groups = meta.positive(Keys.SSM.GROUP_COUNT)
    if inner % heads or heads % groups:
        raise SourceError(f"{meta.path}: {Keys.SSM.INNER_SIZE.format(arch=meta.arch)} ({inner}), "
                          f"{Keys.SSM.TIME_STEP_RANK.format(arch=meta.arch)} ({heads}) and "
                          f"{Keys.SSM.GROUP_COUNT.format(arch=meta.arch)} ({groups}) do not make whole heads and groups")
    # The conv's bias is told by its tensors (no key says it): in every Mamba2 block or in none.
    biases = {i: f"blk.{i}.ssm_conv1d.bias" in shapes for i, kind in enumerate(kinds) if kind is LayerKind.MAMBA2}
    if len(set(biases.values())) > 1:
        missing = next(i for i, present in biases.items() if not present)
        raise SourceError(f"{meta.path}: GGUF tensor blk.{missing}.ssm_conv1d.bias is missing (other Mamba2 blocks "
                          f"have their conv's bias)")
    return Mamba2Dims(num_heads=heads, head_dim=inner // heads, state_size=meta.positive(Keys.SSM.STATE_SIZE),
                      num_groups=groups, conv_kernel=meta.positive(Keys.SSM.CONV_KERNEL),
                      conv_bias=all(biases.values()))


NAMES = GGUFNames(
    family="nemotron_h",
    global_required=QWEN35.global_required,
    output=QWEN35.output,
    every_block=(),
    full_attention=ATTENTION,
    linear_attention=MAMBA2,
    ffn=MOE,
    nextn_required=QWEN35.nextn_required,
    nextn_optional=QWEN35.nextn_optional,
    nextn_fallback=QWEN35.nextn_fallback,
    tiled_value_heads=False,
    position_rows=False,
    blocks=blocks,
    dims=dims,
)
