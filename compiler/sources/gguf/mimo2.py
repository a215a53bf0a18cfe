"""MiMo-V2-Flash GGUF metadata (`mimo2`, as llama.cpp's converter writes it) -> Architecture, and its tensor table.

Keys (conversion/mimo.py `MimoV2Model.set_gguf_parameters`): `block_count` counts the 3 MTP layers
(`nextn_predict_layers`); `attention.head_count` is one for every block (the converter asserts the sliding layers'
equals it), `head_count_kv` one per block (a sliding block's, MTP blocks included, twice a full block's);
`key_length` / `value_length` the q/k and v heads; `sliding_window_pattern` (one per block, the MTP blocks 1) and
`sliding_window`, copied from config.json's `sliding_window`: the release sets it equal to `sliding_window_size`,
the tokens before the query, so the window mtpc attends is that + 1 as from the release itself
(`sources/hf/mimo2.py`: the authors' SGLang; llama.cpp's runtime attends `sliding_window` tokens, the query's own
included, one fewer: its own reading, as vLLM's); `rope.freq_base` / `rope.freq_base_swa`, `rope.dimension_count`
(int(head_dim x partial_rotary_factor)); `attention.value_scale`; `expert_count` / `expert_used_count` /
`expert_feed_forward_length`, `expert_group_count` / `expert_group_used_count`, sigmoid gating with the selection bias
`exp_probs_b.bias`, the chosen weights renormalized (llama.cpp's mimo2 graph always does), no shared expert. No key
says which blocks are dense: the file's tensors do (a leading run without routed experts).

Tensors: q/k/v apart, `attn_sinks.weight` on sliding blocks; the MTP blocks `blk.{L + k}` hold a sliding block with a
dense FFN, `nextn.{eh_proj, enorm, hnorm}` and `layer_output_norm` (`final_layernorm`, the head's final norm); the
LM head is the trunk's. The first is the package's head; the later ones are served as `mtp.heads.{k}.*`, unused.
"""

from __future__ import annotations

from ...util.diagnostics import SourceError
from ...ir import Architecture, HeadLayout, LayerAttention, LayerKind, MoeDims, Rope, SeedHidden
from ...ir.moe import SIGMOID
from .constants import Keys
from .glm4moe import ROUTED_FFN
from .metadata import Metadata, _float32, tensor_shapes, token_ids, trunk_blocks
from .names import QWEN35, GGUFNames, Rule
from .routed_experts import require_sigmoid_gating
from .step35 import _SLIDING_PATTERN, _SLIDING_WINDOW, _FREQ_BASE_SWA, _one_per_kind, _per_block

_VALUE_SCALE = "{arch}.attention.value_scale"


def architecture(meta: Metadata, names: GGUFNames) -> tuple[Architecture, int]:
    """The architecture with `mtp_num_layers` as declared (`layout` judges the head) and the trunk size."""
    blocks, nextn, n_main = trunk_blocks(meta)
    head_dim = meta.positive(Keys.Attention.KEY_LENGTH)
    value_dim = int(meta.get(Keys.Attention.VALUE_LENGTH, head_dim, required=False))
    if value_dim > head_dim:
        raise SourceError(f"{meta.path}: GGUF metadata key {Keys.Attention.VALUE_LENGTH.format(arch=meta.arch)!r} "
                          f"({value_dim}) is wider than key_length ({head_dim})")
    shapes = tensor_shapes(meta.header)
    embd = shapes.get("token_embd.weight")
    if embd is None:
        raise SourceError(f"{meta.path}: GGUF tensor token_embd.weight is missing")
    kinds = [LayerKind.SLIDING_ATTENTION if p else LayerKind.FULL_ATTENTION
             for p in _per_block(meta, _SLIDING_PATTERN, blocks)]
    heads = meta.uniform(Keys.Attention.HEAD_COUNT)
    kv_heads = _one_per_kind(meta, Keys.Attention.HEAD_COUNT_KV, _per_block(meta, Keys.Attention.HEAD_COUNT_KV, blocks),
                             kinds)
    rotary = int(meta.get(Keys.Rope.DIMENSION_COUNT, head_dim, required=False))
    if not 0 < rotary <= head_dim or rotary % 2:
        raise SourceError(f"{meta.path}: {Keys.Rope.DIMENSION_COUNT.format(arch=meta.arch)} ({rotary}) must be an even "
                          f"rotary width of at most key_length ({head_dim})")
    theta = _float32(meta.get(Keys.Rope.FREQ_BASE))
    full_rope = Rope(theta, rotary / head_dim, head_dim, position_rows=False)
    sliding = window = None
    first_sliding = next((i for i, k in enumerate(kinds) if k is LayerKind.SLIDING_ATTENTION), None)
    if first_sliding is not None:
        window = int(meta.get(_SLIDING_WINDOW)) + 1  # the tokens before the query, and the query
        rope = Rope(_float32(meta.get(_FREQ_BASE_SWA, theta, required=False)), rotary / head_dim, head_dim,
                    position_rows=False)
        sinks = f"blk.{first_sliding}.attn_sinks.weight" in shapes
        sliding = LayerAttention(heads, kv_heads[LayerKind.SLIDING_ATTENTION], head_dim, value_dim, rope, window=window,
                                 sinks=sinks)
    full = kv_heads.get(LayerKind.FULL_ATTENTION, kv_heads.get(LayerKind.SLIDING_ATTENTION))
    arch = Architecture(
        family=names.family, hidden_size=int(meta.get(Keys.LLM.EMBEDDING_LENGTH)),
        intermediate_size=meta.uniform(Keys.LLM.FEED_FORWARD_LENGTH), num_attention_heads=heads,
        num_key_value_heads=full, head_dim=head_dim, vocab_size=int(embd[0]), layer_kinds=tuple(kinds[:n_main]),
        rms_norm_eps=_float32(meta.get(Keys.Attention.LAYERNORM_RMS_EPS)), rope=full_rope,
        context_length=int(meta.get(Keys.LLM.CONTEXT_LENGTH)), tokens=token_ids(meta), sliding_window=window,
        tie_word_embeddings="output.weight" not in shapes, moe=_moe(meta, n_main, shapes),
        mtp_num_layers=min(nextn, 1), head_layout=HeadLayout.MTP_MODULE, attention_output_gate=False,
        attention_bias=False, qk_norm=False, sliding_attention=sliding,
        value_head_dim=value_dim if value_dim != head_dim else None,
        mtp_layer_kind=kinds[n_main] if nextn else LayerKind.FULL_ATTENTION, mtp_chained_layers=nextn,
        mtp_seed_hidden=SeedHidden.POST_NORM,
        attention_value_scale=_float32(meta.get(_VALUE_SCALE, 1.0, required=False)),
    )
    return arch, n_main


def _moe(meta: Metadata, n_main: int, shapes) -> MoeDims:
    def key(k: str) -> str:
        return k.format(arch=meta.arch)

    require_sigmoid_gating(meta, "MiMo-V2-Flash")
    experts, top_k = meta.positive(Keys.LLM.EXPERT_COUNT), meta.positive(Keys.LLM.EXPERT_USED_COUNT)
    groups = int(meta.get(Keys.LLM.EXPERT_GROUP_COUNT, 1, required=False)) or 1
    kept = int(meta.get(Keys.LLM.EXPERT_GROUP_USED_COUNT, 1, required=False)) or 1
    if experts % groups or kept > groups or top_k > kept * (experts // groups):
        raise SourceError(f"{meta.path}: GGUF metadata keys {key(Keys.LLM.EXPERT_GROUP_COUNT)!r} ({groups}), "
                          f"{key(Keys.LLM.EXPERT_GROUP_USED_COUNT)!r} ({kept}) and {key(Keys.LLM.EXPERT_USED_COUNT)!r} "
                          f"({top_k}) do not route {experts} experts")
    # A block with any routed tensor is sparse (one left out is then named as missing, not read as dense).
    sparse = [any(f"blk.{i}.{r.gguf}" in shapes for r in _ROUTED) for i in range(n_main)]
    dense = sparse.index(True) if True in sparse else n_main
    if sparse != [False] * dense + [True] * (n_main - dense):
        raise SourceError(f"{meta.path}: GGUF blocks {[i for i, s in enumerate(sparse) if s]} are sparse; mtpc builds a "
                          "leading run of dense blocks, then sparse ones")
    return MoeDims(num_experts=experts, top_k=top_k, expert_intermediate_size=meta.positive(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH),
                   shared_expert_intermediate_size=0, normalize_top_k=True, shared_expert_sigmoid_gate=False,
                   scoring=SIGMOID, selection_bias=True, num_groups=groups, top_k_groups=kept,
                   routed_scaling_factor=_float32(meta.get(Keys.LLM.EXPERT_WEIGHTS_SCALE, 1.0, required=False)),
                   dense_layers=dense, sparse_mtp=False)


def _attention(kv: str, values: str, out: str, *, sinks: bool) -> tuple[Rule, ...]:
    rules = (Rule("attn_q.weight", "self_attn.q_proj.weight", ("O", "H")),
             Rule("attn_k.weight", "self_attn.k_proj.weight", (kv, "H")),
             Rule("attn_v.weight", "self_attn.v_proj.weight", (values, "H")),
             Rule("attn_output.weight", "self_attn.o_proj.weight", ("H", out)))
    return rules + ((Rule("attn_sinks.weight", "self_attn.sinks", ("NH",)),) if sinks else ())


# MiMo-V2-Flash (llama.cpp's `mimo2`): no Q/K permutation (NeoX order), plain norms; full and sliding blocks with their
# own KV heads (`KV` / `KVS`), values `value_length` wide, sinks on sliding blocks; no shared expert.
_ROUTED = tuple(r for r in ROUTED_FFN if "shared_expert" not in r.canonical)
NAMES = GGUFNames(
    family="mimo2",
    global_required=QWEN35.global_required,
    output=QWEN35.output,
    every_block=(Rule("attn_norm.weight", "input_layernorm.weight", ("H",)),
                 Rule("ffn_norm.weight", "post_attention_layernorm.weight", ("H",))),
    full_attention=_attention("KV", "VKV", "OV", sinks=False),
    sliding_attention=_attention("KVS", "VKVS", "OVS", sinks=True),
    linear_attention=(),
    ffn=_ROUTED,
    dense_ffn=QWEN35.ffn,
    nextn_required=(*QWEN35.nextn_required, Rule("layer_output_norm.weight", "mtp.norm.weight", ("H",))),
    nextn_optional=(QWEN35.nextn_optional[0],),
)
