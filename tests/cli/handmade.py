"""A small onnxruntime-genai package written by hand, to check the checker and the CLI.

Four layers (linear, full, linear, full), hidden 32, vocabulary 64. The graphs
declare only their inputs, outputs and an initializer or two: the checks read
names, dtypes and shapes, never run them. Names follow the onnxruntime-genai
0.18.0 builder's tiny Qwen3.5 export (reference `builder-io/`), written out
here literally rather than derived from mtpc's own contracts.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, VOCAB, KV_HEADS, HEAD_DIM = 32, 64, 2, 16
CONV_DIM, CONV_K1, V_HEADS, K_DIM, V_DIM = 96, 3, 4, 8, 8
LINEAR_LAYERS, FULL_LAYERS = (0, 2), (1, 3)
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def main_io():
    inputs = [
        _vi("input_ids", I64, ["batch_size", "sequence_length"]),
        _vi("attention_mask", I64, ["batch_size", "total_sequence_length"]),
        _vi("position_ids", I64, [3, "batch_size", "sequence_length"]),
    ]
    outputs = [
        _vi("logits", F32, ["batch_size", "sequence_length", VOCAB]),
        _vi("hidden_states", F32, ["batch_size", "sequence_length", HIDDEN]),
    ]
    for i in range(4):
        if i in LINEAR_LAYERS:
            for kind, shape in (("conv", ["batch_size", CONV_DIM, CONV_K1]), ("recurrent", ["batch_size", V_HEADS, K_DIM, V_DIM])):
                inputs.append(_vi(f"past.{i}.{kind}", F32, shape))
                outputs.append(_vi(f"present.{i}.{kind}", F32, shape))
        else:
            for kind in ("key", "value"):
                inputs.append(_vi(f"past_key_values.{i}.{kind}", F32, ["batch_size", KV_HEADS, "past_sequence_length", HEAD_DIM]))
                outputs.append(_vi(f"present.{i}.{kind}", F32, ["batch_size", KV_HEADS, "total_sequence_length", HEAD_DIM]))
    return inputs, outputs


def head_io():
    inputs = [
        _vi("input_ids", I64, ["batch_size", "sequence_length"]),
        _vi("hidden_states", F32, ["batch_size", "sequence_length", HIDDEN]),
        _vi("attention_mask", I64, ["batch_size", "total_sequence_length"]),
        _vi("position_ids", I64, [3, "batch_size", "sequence_length"]),
        _vi("past_key_values.0.key", F32, ["batch_size", KV_HEADS, "past_sequence_length", HEAD_DIM]),
        _vi("past_key_values.0.value", F32, ["batch_size", KV_HEADS, "past_sequence_length", HEAD_DIM]),
    ]
    outputs = [
        _vi("logits", F32, ["batch_size", "sequence_length", VOCAB]),
        _vi("hidden_states_out", F32, ["batch_size", "sequence_length", HIDDEN]),
        _vi("present.0.key", F32, ["batch_size", KV_HEADS, "total_sequence_length", HEAD_DIM]),
        _vi("present.0.value", F32, ["batch_size", KV_HEADS, "total_sequence_length", HEAD_DIM]),
    ]
    return inputs, outputs


def save_graph(path: Path, inputs, outputs, *, data_file: str | None = None) -> None:
    embedding = numpy_helper.from_array(np.arange(VOCAB * HIDDEN, dtype=np.float32).reshape(VOCAB, HIDDEN), "model.embed_tokens.weight")
    graph = helper.make_graph([], path.stem, inputs, outputs, initializer=[embedding])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    path.parent.mkdir(parents=True, exist_ok=True)
    if data_file:
        onnx.save(model, str(path), save_as_external_data=True, location=data_file, size_threshold=0)
    else:
        onnx.save(model, str(path))


DECODER_INPUTS = {
    "input_ids": "input_ids",
    "attention_mask": "attention_mask",
    "position_ids": "position_ids",
    "past_key_names": "past_key_values.%d.key",
    "past_value_names": "past_key_values.%d.value",
    "past_conv_names": "past.%d.conv",
    "past_recurrent_names": "past.%d.recurrent",
}
DECODER_OUTPUTS = {
    "logits": "logits",
    "present_key_names": "present.%d.key",
    "present_value_names": "present.%d.value",
    "present_conv_names": "present.%d.conv",
    "present_recurrent_names": "present.%d.recurrent",
    "hidden_states": "hidden_states",
}
HEAD_INPUTS = {
    "input_ids": "input_ids",
    "hidden_states": "hidden_states",
    "attention_mask": "attention_mask",
    "position_ids": "position_ids",
    "past_key_names": "past_key_values.%d.key",
    "past_value_names": "past_key_values.%d.value",
}
HEAD_OUTPUTS = {
    "logits": "logits",
    "hidden_states": "hidden_states_out",
    "present_key_names": "present.%d.key",
    "present_value_names": "present.%d.value",
}


def _document(decoder: dict) -> dict:
    return {
        "model": {
            "bos_token_id": 1,
            "context_length": 128,
            "decoder": decoder,
            "eos_token_id": 2,
            "pad_token_id": 0,
            "type": "qwen3_5_text",
            "vocab_size": VOCAB,
        },
        "search": {"do_sample": False, "max_length": 128, "num_beams": 1, "top_k": 50, "top_p": 1.0},
    }


def main_config() -> dict:
    decoder = {
        "filename": "model.onnx",
        "head_size": HEAD_DIM,
        "hidden_size": HIDDEN,
        "inputs": dict(DECODER_INPUTS),
        "outputs": dict(DECODER_OUTPUTS),
        "num_attention_heads": 4,
        "num_hidden_layers": 4,
        "num_key_value_heads": KV_HEADS,
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
    }
    doc = _document(decoder)
    doc["model"]["mtp"] = {
        "enabled": True,
        "filename": "mtp/mtp.onnx",
        "num_hidden_layers": 1,
        "num_key_value_heads": KV_HEADS,
        "head_size": HEAD_DIM,
        "main_hidden_states": "hidden_states",
        "inputs": dict(HEAD_INPUTS),
        "outputs": dict(HEAD_OUTPUTS),
    }
    doc["speculative"] = {"max_draft_tokens": 2}
    return doc


def head_config() -> dict:
    decoder = {
        "filename": "mtp.onnx",
        "head_size": HEAD_DIM,
        "hidden_size": HIDDEN,
        "inputs": dict(HEAD_INPUTS),
        "outputs": dict(HEAD_OUTPUTS),
        "num_attention_heads": 4,
        "num_hidden_layers": 1,
        "num_key_value_heads": KV_HEADS,
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
    }
    return _document(decoder)


def write_package(root: Path, *, config: dict | None = None, main=None, head=None) -> Path:
    """The sound package, or one with the given config / graph I/O swapped in."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "genai_config.json").write_text(json.dumps(config or main_config(), indent=2), encoding="utf-8")
    (root / "mtp").mkdir(exist_ok=True)
    (root / "mtp" / "genai_config.json").write_text(json.dumps(head_config(), indent=2), encoding="utf-8")
    save_graph(root / "model.onnx", *(main or main_io()), data_file="model.onnx.data")
    save_graph(root / "mtp" / "mtp.onnx", *(head or head_io()), data_file="mtp.onnx.data")
    for name, doc in tokenizer_files().items():
        (root / name).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return root


def tokenizer_files() -> dict[str, dict]:
    """A BPE tokenizer with one printable character per id and no merges, and its config: og.Tokenizer reads both."""
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "vocab": {chr(0x21 + i): i for i in range(VOCAB)}, "merges": []},
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": {"tokenizer_class": "Qwen2Tokenizer"}}


def renamed(values, old: str, new: str):
    """A copy of value infos with one tensor renamed."""
    out = []
    for vi in values:
        vi = copy.deepcopy(vi)
        if vi.name == old:
            vi.name = new
        out.append(vi)
    return out


def reshaped(values, name: str, dtype, shape):
    return [(_vi(name, dtype, shape) if vi.name == name else copy.deepcopy(vi)) for vi in values]
