"""Rewrite dense graph I/O to onnxruntime-genai's packed (paged) layout.

When the onnxruntime_genai target uses paged attention, the main decoder and
that runtime's MTP head take all sequences' new tokens packed along one axis
and keep full-attention KV in a block pool:

- tokens `[num_tokens]`, positions `[3, num_tokens]`, hidden states and logits
  `[num_tokens, width]` (one row per token, never per logits row);
- KV `[num_blocks, block_size, kv_heads, head_size]`;
- no `attention_mask`; four int32 inputs instead (`block_table`,
  `cumulative_sequence_lengths`, `past_sequence_lengths`, `attention_metadata`);
- linear-attention state stays per sequence slot: conv `[batch, conv_dim, K-1]`
  in the I/O dtype, recurrent float32 and V-major `[batch, Hv, Dv, Dk]`;
- with `prune_lm_head`, the main decoder takes `logits_indices` `[num_logits]` and its logits are
  `[num_logits, vocab]`, while `hidden_states` stays `[num_tokens, hidden]`;
- the main decoder declares its state groups (paged KV for attention layers,
  fixed conv and recurrent state for linear layers);
- with a head (speculative decoding) and linear layers, the main decoder also exposes compact
  state updates for `max_draft_tokens` tokens: inputs `state_update_capture_count` `[batch]` and
  `state_update_active` `[1]`, outputs per linear layer `state_update.%d.conv_value`
  `[batch, capacity, conv_dim]` and `state_update.%d.recurrent_capsule` (float32
  `[batch, capacity * (Hv + Hk*Dk + Hv*Dv)]`), and its fixed groups declare them. The paged engine
  of onnxruntime-genai 0.18.0 drafts at most that many tokens per step on a model with fixed state
  (`PagedCacheManager::MaxDraftTokensPerStep` caps drafts at `FixedStatePool::StateUpdateCapacity`,
  0 without state updates) because a rejected draft's conv / recurrent transitions can only be
  undone by replaying the accepted prefix from these captures (`FixedStateReservation::CommitPrefix`).

The MTP projection writes every head dense; this pass re-packs onnxruntime-genai's
head along with the main decoder. A dense target is left untouched, and so is
onnx-genai's head (dense runtime).
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..ir.contracts import (
    BATCH,
    LOGITS_INDICES,
    NUM_LOGITS,
    NUM_TOKENS,
    PAGED_INPUT_NAMES,
    STATE_UPDATE_INPUT_NAMES,
    STATE_UPDATE_OUTPUT_NAMES,
)
from ..util.diagnostics import MtpcError
from ..ir import (
    Architecture,
    AttentionMode,
    DecoderConfig,
    GraphContract,
    HeadContract,
    ModelIR,
    StateGroup,
    TensorSpec,
)
from .pipeline import PassResult

NUM_BLOCKS = "num_blocks"
BLOCK_SIZE = "block_size"
MAX_NUM_BLOCKS = "max_num_blocks"

PAGED_INPUTS = tuple(
    TensorSpec(name, "int32", shape)
    for name, shape in zip(
        PAGED_INPUT_NAMES,
        (
            (BATCH, MAX_NUM_BLOCKS),  # block_table
            # cumulative_sequence_lengths: prefix sums of each sequence's new-token count.
            (f"{BATCH} + 1",),
            (BATCH,),  # past_sequence_lengths
            # attention_metadata, host-resident [max_query_len_bound, max_kv_len_bound, max_kv_len_lower_bound]:
            # lets PagedAttention pick a kernel without a device-to-host sync.
            (3,),
        ),
        strict=True,
    )
)
# The GatedDeltaNet op keeps its recurrent state in float32 whatever the activations
# (precision matters most at the recurrence) and V-major, [batch, Hv, Dv, Dk]; the
# dense LinearAttention op's state is [batch, Hv, Dk, Dv].
RECURRENT_STATE_DTYPE = "float32"


class PagedIoRewrite:
    name = "paged-io"

    def __call__(self, ir: ModelIR) -> PassResult:
        target = ir.targets.onnxruntime_genai
        if target is None or target.attention is AttentionMode.DENSE:
            return PassResult(ir, False)
        changes: list[str] = []
        main = ir.main
        if main.attention is AttentionMode.DENSE:
            if main.sliding_window is not None:
                raise MtpcError.single(
                    "paged attention with sliding-window layers is not supported",
                    hint="use attention: dense",
                    path="targets.onnxruntime_genai.attention",
                )
            main = replace(packed_decoder(main), state_groups=_state_groups(ir.architecture))
            groups = ", ".join(f"{g.kind} {list(g.layer_ids)}" for g in main.state_groups)
            changes.append(f"main decoder: packed paged I/O; state groups {groups}")
            if target.prune_lm_head:
                main = with_selected_logits(main)
                changes.append(f"main decoder: LM head on the {LOGITS_INDICES} rows only ([{NUM_LOGITS}, vocab] logits; "
                               f"hidden states keep one row per token)")
            drafts = ir.head(HeadContract.ORT_GENAI) is not None
            if drafts and ir.architecture.state_layers:
                main = with_state_updates(main, ir.architecture, target.max_draft_tokens)
                changes.append(f"main decoder: compact state updates for {target.max_draft_tokens} draft tokens "
                               f"(rejected drafts roll back the linear layers)")
        heads = []
        for contract, cfg in ir.heads:
            if contract is HeadContract.ORT_GENAI and cfg.attention is AttentionMode.DENSE:
                cfg = packed_decoder(cfg)
                changes.append(f"head {contract.value}: packed paged I/O")
            heads.append((contract, cfg))
        if not changes:
            return PassResult(ir, False)
        return PassResult(replace(ir, main=main, heads=tuple(heads)), True, tuple(changes))


def packed_decoder(cfg: DecoderConfig) -> DecoderConfig:
    """The paged variant of a dense decoder config: packed contract, paged input names."""
    if cfg.attention is not AttentionMode.DENSE:
        raise AssertionError(f"{cfg.filename} is already {cfg.attention.value}")
    input_roles = _roles_by_name(cfg.inputs, cfg.contract.inputs)
    output_roles = _roles_by_name(cfg.outputs, cfg.contract.outputs)
    inputs = [_packed(t, input_roles[t.name]) for t in cfg.contract.inputs if input_roles[t.name] != "attention_mask"]
    outputs = [_packed(t, output_roles[t.name]) for t in cfg.contract.outputs]
    names = {role: name for role, name in cfg.inputs if role != "attention_mask"}
    names.update((name, name) for name in PAGED_INPUT_NAMES)
    return replace(
        cfg,
        attention=AttentionMode.PAGED,
        inputs=tuple(names.items()),
        contract=GraphContract(tuple(inputs) + PAGED_INPUTS, tuple(outputs)),
    )


def _roles_by_name(role_names, tensors) -> dict[str, str]:
    """Which role (`past_key_names`, `logits`, ...) each tensor of a contract plays."""
    patterns = [(role, re.compile(re.escape(name).replace("%d", r"\d+") + r"\Z")) for role, name in role_names]
    roles = {}
    for tensor in tensors:
        matching = [role for role, pattern in patterns if pattern.match(tensor.name)]
        if len(matching) != 1:
            raise AssertionError(f"tensor {tensor.name} matches roles {matching}, expected exactly one")
        roles[tensor.name] = matching[0]
    return roles


def _packed(tensor: TensorSpec, role: str) -> TensorSpec:
    shape = tensor.shape
    if role == "input_ids":
        return replace(tensor, shape=(NUM_TOKENS,))
    if role == "position_ids":  # three MRoPE rows of packed tokens, or one
        return replace(tensor, shape=(shape[0], NUM_TOKENS) if len(shape) == 3 else (NUM_TOKENS,))
    if role in ("hidden_states", "logits"):
        return replace(tensor, shape=(NUM_TOKENS, shape[-1]))
    if role in ("past_key_names", "past_value_names", "present_key_names", "present_value_names"):
        _, kv_heads, _, head_size = shape
        return replace(tensor, shape=(NUM_BLOCKS, BLOCK_SIZE, kv_heads, head_size))
    if role in ("past_conv_names", "present_conv_names"):
        return tensor
    if role in ("past_recurrent_names", "present_recurrent_names"):
        batch, value_heads, key_dim, value_dim = shape
        return replace(tensor, dtype=RECURRENT_STATE_DTYPE, shape=(batch, value_heads, value_dim, key_dim))
    raise AssertionError(f"no packed layout for role {role} ({tensor.name})")


def with_selected_logits(cfg: DecoderConfig) -> DecoderConfig:
    """`cfg` (paged) with its LM head pruned to the rows of a `logits_indices` input.

    onnxruntime-genai 0.18.0's engine feeds `logits_indices` (int32 `[num_logits]`) when the graph has
    it: per sequence, the rows of the drafts it verifies, then its last row (GetSelectedLogitsIndices),
    and reads `[num_logits, vocab]` logits; a `batch_size` first dim would be refused ("A decoder with a
    logits_indices input must emit the selected rows"). The hidden-state output is bound by token count
    (VarlenDecoderIO::PrepareHiddenStates; the MTP head reads any accepted row), so it keeps every row.
    """
    if cfg.attention is not AttentionMode.PAGED:
        raise AssertionError("logits_indices belongs to a paged decoder")
    logits = cfg.output_name("logits")
    outputs = tuple(replace(t, shape=(NUM_LOGITS, t.shape[-1])) if t.name == logits else t for t in cfg.contract.outputs)
    inputs = cfg.contract.inputs + (TensorSpec(LOGITS_INDICES, "int32", (NUM_LOGITS,)),)
    return replace(cfg, inputs=cfg.inputs + ((LOGITS_INDICES, LOGITS_INDICES),), contract=GraphContract(inputs, outputs))


def with_state_updates(cfg: DecoderConfig, arch: Architecture, capacity: int) -> DecoderConfig:
    """`cfg` (paged) with compact state-update I/O for `capacity` tokens on every linear layer."""
    linear = arch.state_layers
    if not linear or cfg.attention is not AttentionMode.PAGED:
        raise AssertionError("compact state updates belong to a paged decoder with linear-attention layers")
    # GatedDeltaNet's capsule: per token the decays, the keys, the deltas (a Mamba2 layer: G key heads of N).
    (conv_dim, _), (value_heads, key_dim, value_dim) = arch.state_shapes()
    key_heads = arch.mamba.num_groups if arch.mamba is not None else arch.linear_attention.num_key_heads
    conv_dtype = cfg.contract.input(cfg.input_name("past_conv_names") % linear[0]).dtype
    capsule_width = capacity * (value_heads + key_heads * key_dim + value_heads * value_dim)
    conv_names = STATE_UPDATE_OUTPUT_NAMES["state_update_conv_value_names"]
    capsule_names = STATE_UPDATE_OUTPUT_NAMES["state_update_recurrent_capsule_names"]
    inputs = (TensorSpec(STATE_UPDATE_INPUT_NAMES["state_update_capture_count"], "int32", (BATCH,)),
              TensorSpec(STATE_UPDATE_INPUT_NAMES["state_update_active"], "int32", (1,)))
    outputs = tuple(TensorSpec(conv_names % i, conv_dtype, (BATCH, capacity, conv_dim)) for i in linear) + tuple(
        TensorSpec(capsule_names % i, RECURRENT_STATE_DTYPE, (BATCH, capsule_width)) for i in linear)
    groups = tuple(
        replace(g, state_update_capacity=capacity, key_head_count=key_heads if g.kind == "fixed_recurrent" else 0)
        if g.kind.startswith("fixed_") else g
        for g in cfg.state_groups
    )
    return replace(
        cfg,
        inputs=cfg.inputs + tuple(STATE_UPDATE_INPUT_NAMES.items()),
        outputs=cfg.outputs + tuple(STATE_UPDATE_OUTPUT_NAMES.items()),
        contract=GraphContract(cfg.contract.inputs + inputs, cfg.contract.outputs + outputs),
        state_groups=groups,
        state_update_capacity=capacity,
    )


def _state_groups(arch: Architecture) -> tuple[StateGroup, ...]:
    attention = arch.attention_layers
    linear = arch.state_layers
    if not attention:
        raise AssertionError("a paged decoder needs at least one attention layer")
    groups = [StateGroup("paged_kv", attention)]
    if linear:
        groups += [StateGroup("fixed_conv", linear), StateGroup("fixed_recurrent", linear)]
    return tuple(groups)
