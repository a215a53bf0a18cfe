"""Dense I/O contracts of the graphs we emit, derived from the architecture.

The names follow what onnxruntime-genai 0.18.0's own Qwen3.5 export writes
(`past.%d.conv`, `past.%d.recurrent`, `hidden_states`, `hidden_states_out`), so a
package from us and one from the reference builder are interchangeable. Paged
variants are produced from these by `passes/paged_io.py`.
"""

from __future__ import annotations

from .model import Architecture, DecoderConfig, Dim, GraphContract, LayerAttention, LayerKind, Precision, TensorSpec

BATCH = "batch_size"
SEQUENCE = "sequence_length"
TOTAL_SEQUENCE = "total_sequence_length"
PAST_SEQUENCE = "past_sequence_length"
NUM_TOKENS = "num_tokens"
NUM_LOGITS = "num_logits"

# role -> graph name template; "%d" is the absolute layer index of the graph.
MAIN_INPUT_NAMES = {
    "input_ids": "input_ids",
    "attention_mask": "attention_mask",
    "position_ids": "position_ids",
    "past_key_names": "past_key_values.%d.key",
    "past_value_names": "past_key_values.%d.value",
    "past_conv_names": "past.%d.conv",
    "past_recurrent_names": "past.%d.recurrent",
}
MAIN_OUTPUT_NAMES = {
    "logits": "logits",
    "present_key_names": "present.%d.key",
    "present_value_names": "present.%d.value",
    "present_conv_names": "present.%d.conv",
    "present_recurrent_names": "present.%d.recurrent",
    "hidden_states": "hidden_states",
}
ORT_HEAD_INPUT_NAMES = {
    "input_ids": "input_ids",
    "hidden_states": "hidden_states",
    "attention_mask": "attention_mask",
    "position_ids": "position_ids",
    "past_key_names": "past_key_values.%d.key",
    "past_value_names": "past_key_values.%d.value",
}
ORT_HEAD_OUTPUT_NAMES = {
    "logits": "logits",
    "hidden_states": "hidden_states_out",
    "present_key_names": "present.%d.key",
    "present_value_names": "present.%d.value",
}
ONNX_GENAI_HEAD_INPUT_NAMES = {
    "inputs_embeds": "inputs_embeds",
    "hidden_states": "hidden_states",
    "attention_mask": "attention_mask",
    "position_ids": "position_ids",
    "past_key_names": "past_key_values.%d.key",
    "past_value_names": "past_key_values.%d.value",
}
ONNX_GENAI_HEAD_OUTPUT_NAMES = {
    "hidden_states": "mtp_hidden",
    "present_key_names": "present.%d.key",
    "present_value_names": "present.%d.value",
}


# Inputs onnxruntime-genai's paged attention adds in place of `attention_mask` (role key = graph name),
# in the order the paged graphs declare them.
PAGED_INPUT_NAMES = ("block_table", "cumulative_sequence_lengths", "past_sequence_lengths", "attention_metadata")

# The paged decoder input selecting the packed rows its LM head runs on (prune_lm_head).
LOGITS_INDICES = "logits_indices"

# Compact state updates of a paged hybrid decoder (role -> graph name), the names onnxruntime-genai
# 0.18.0's builder writes with state_update_capacity: per linear layer, the conv inputs and the
# recurrent transitions of the first `capture_count` tokens of each sequence, so the engine can
# commit an accepted prefix of a verify step without re-running it.
STATE_UPDATE_INPUT_NAMES = {"state_update_capture_count": "state_update_capture_count",
                            "state_update_active": "state_update_active"}
STATE_UPDATE_OUTPUT_NAMES = {"state_update_conv_value_names": "state_update.%d.conv_value",
                             "state_update_recurrent_capsule_names": "state_update.%d.recurrent_capsule"}


def _kv_specs(attention: LayerAttention, layer: int, dtype: str, input_names: dict[str, str],
              output_names: dict[str, str]):
    """Past and present key/value tensors of one attention layer (its own KV heads and cached head width),
    named by a contract's role templates."""
    shape_past = (BATCH, attention.num_key_value_heads, PAST_SEQUENCE, attention.cached_head_dim)
    shape_present = (BATCH, attention.num_key_value_heads, TOTAL_SEQUENCE, attention.cached_head_dim)
    ins, outs = [], []
    for kind in ("key", "value"):
        ins.append(TensorSpec(input_names[f"past_{kind}_names"] % layer, dtype, shape_past))
        outs.append(TensorSpec(output_names[f"present_{kind}_names"] % layer, dtype, shape_present))
    return ins, outs


def _positions(arch: Architecture) -> tuple[Dim, ...]:
    """Interleaved MRoPE takes three position rows (T, H, W), equal for text; plain RoPE one row."""
    return (3, BATCH, SEQUENCE) if arch.rope.position_rows else (BATCH, SEQUENCE)


def main_contract(arch: Architecture, precision: Precision) -> GraphContract:
    io = precision.io_dtype
    names_in, names_out = MAIN_INPUT_NAMES, MAIN_OUTPUT_NAMES
    inputs = [
        TensorSpec(names_in["input_ids"], "int64", (BATCH, SEQUENCE)),
        TensorSpec(names_in["attention_mask"], "int64", (BATCH, TOTAL_SEQUENCE)),
        TensorSpec(names_in["position_ids"], "int64", _positions(arch)),
    ]
    outputs = [
        TensorSpec(names_out["logits"], precision.effective_logits_dtype, (BATCH, SEQUENCE, arch.vocab_size)),
        TensorSpec(names_out["hidden_states"], io, (BATCH, SEQUENCE, arch.hidden_size)),
    ]
    lin = arch.linear_attention
    for i, kind in enumerate(arch.layer_kinds):
        if kind is LayerKind.LINEAR_ATTENTION:
            assert lin is not None
            conv = (BATCH, lin.conv_dim, lin.conv_kernel - 1)
            rec = (BATCH, lin.num_value_heads, lin.key_head_dim, lin.value_head_dim)
            inputs += [TensorSpec(names_in["past_conv_names"] % i, io, conv),
                       TensorSpec(names_in["past_recurrent_names"] % i, io, rec)]
            outputs += [TensorSpec(names_out["present_conv_names"] % i, io, conv),
                        TensorSpec(names_out["present_recurrent_names"] % i, io, rec)]
        else:
            ins, outs = _kv_specs(arch.layer_attention(kind), i, io, names_in, names_out)
            inputs += ins
            outputs += outs
    return GraphContract(tuple(inputs), tuple(outputs))


def ort_head_contract(arch: Architecture, precision: Precision) -> GraphContract:
    io = precision.io_dtype
    names_in, names_out = ORT_HEAD_INPUT_NAMES, ORT_HEAD_OUTPUT_NAMES
    inputs = [
        TensorSpec(names_in["input_ids"], "int64", (BATCH, SEQUENCE)),
        TensorSpec(names_in["hidden_states"], io, (BATCH, SEQUENCE, arch.hidden_size)),
        TensorSpec(names_in["attention_mask"], "int64", (BATCH, TOTAL_SEQUENCE)),
        TensorSpec(names_in["position_ids"], "int64", _positions(arch)),
    ]
    outputs = [
        TensorSpec(names_out["logits"], precision.effective_logits_dtype, (BATCH, SEQUENCE, arch.vocab_size)),
        TensorSpec(names_out["hidden_states"], io, (BATCH, SEQUENCE, arch.hidden_size)),
    ]
    ins, outs = _kv_specs(arch.attention_at(None), 0, io, names_in, names_out)
    return GraphContract(tuple(inputs + ins), tuple(outputs + outs))


def onnx_genai_head_contract(arch: Architecture, precision: Precision) -> GraphContract:
    """onnx-genai embeds tokens and applies the LM head itself, borrowing the target's initializers."""
    io = precision.io_dtype
    names_in, names_out = ONNX_GENAI_HEAD_INPUT_NAMES, ONNX_GENAI_HEAD_OUTPUT_NAMES
    inputs = [
        TensorSpec(names_in["inputs_embeds"], io, (BATCH, SEQUENCE, arch.hidden_size)),
        TensorSpec(names_in["hidden_states"], io, (BATCH, SEQUENCE, arch.hidden_size)),
        TensorSpec(names_in["attention_mask"], "int64", (BATCH, TOTAL_SEQUENCE)),
        # onnx-genai feeds rank-2 absolute positions.
        TensorSpec(names_in["position_ids"], "int64", (BATCH, SEQUENCE)),
    ]
    outputs = [TensorSpec(names_out["hidden_states"], io, (BATCH, SEQUENCE, arch.hidden_size))]
    ins, outs = _kv_specs(arch.attention_at(None), 0, io, names_in, names_out)
    return GraphContract(tuple(inputs + ins), tuple(outputs + outs))


def main_decoder_config(arch: Architecture, precision: Precision, *, execution_provider: str = "cpu") -> DecoderConfig:
    """The main decoder as lowered: dense contract, names for the layer kinds it has."""
    has_linear = any(k is LayerKind.LINEAR_ATTENTION for k in arch.layer_kinds)
    state_roles = ("past_conv_names", "past_recurrent_names", "present_conv_names", "present_recurrent_names")
    inputs = {k: v for k, v in MAIN_INPUT_NAMES.items() if has_linear or k not in state_roles}
    outputs = {k: v for k, v in MAIN_OUTPUT_NAMES.items() if has_linear or k not in state_roles}
    return DecoderConfig(
        filename="model.onnx",
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        head_size=arch.head_dim,
        layer_kinds=arch.layer_kinds,
        inputs=tuple(inputs.items()),
        outputs=tuple(outputs.items()),
        contract=main_contract(arch, precision),
        execution_provider=execution_provider,
        conv_kernel=arch.linear_attention.conv_kernel if arch.linear_attention and has_linear else 0,
    )


# Initializer names in the main graph that runtimes borrow by name (onnx-genai's MTP sidecar reads the
# target's embedding and LM head instead of carrying copies). The graph emitter must use exactly these
# names. A quantized embedding is stored under other names (`model.embed_tokens.weight_Q4`, ...: the
# sidecar cannot borrow it anyway); a quantized LM head keeps LM_HEAD_INITIALIZER for its packed
# MatMulNBits data, with its scales and zero points named by `quantized_companions`.
EMBEDDING_INITIALIZER = "model.embed_tokens.weight"
LM_HEAD_INITIALIZER = "lm_head.MatMul.weight"


def quantized_companions(weight: str) -> tuple[str, str]:
    """(scales, zero points) of a packed MatMulNBits weight, named the way onnx-genai looks them up.

    onnx-genai's native MTP loader borrows a quantized LM head by the packed weight's name and finds
    its companions as `<name minus its last .segment>.scales` / `.zero_points` (`lm_head.weight` ->
    `lm_head.scales`); see shared/reference/inference-metadata.md §4.5.
    """
    prefix = weight.rsplit(".", 1)[0]
    return f"{prefix}.scales", f"{prefix}.zero_points"


def quantized_names(weight: str, bits: int) -> tuple[str, str, str]:
    """Initializer names of a MatMulNBits / GatherBlockQuantized weight: (packed data, scales, zero points).

    The onnxruntime-genai builder's `<weight>_Q4` / `_scales` / `_zp` for every weight but the LM head,
    which a runtime borrows by name: its packed data keeps the weight's own name and its companions follow
    onnx-genai's convention, so the same package serves both runtimes.
    """
    if weight == LM_HEAD_INITIALIZER:
        return (weight, *quantized_companions(weight))
    return f"{weight}_Q{bits}", f"{weight}_scales", f"{weight}_zp"
