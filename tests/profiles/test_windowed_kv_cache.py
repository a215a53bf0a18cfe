"""Why a sliding layer keeps a full-length KV cache in mtpc's onnxruntime-genai packages
(`OrtGenaiProfile.sliding_kv_cache`), shown on the installed release.

onnxruntime-genai can hold a window-sized cache: a `decoder.sliding_window` section naming the layers, a shared
past / present buffer, and GroupQueryAttention's `sliding_window_cache` (onnxruntime evicts inside the op). It
then decodes greedily as the numpy reference does. But it refuses to rewind such a cache once it has evicted
("Cannot rewind to ... the sliding-window KV cache holds only the last ..."), and og.MtpGenerator rewinds the
main model after every rejected draft. With a dense dynamic cache the runtime sizes each sliding layer's present
at the window plus slack, a shape the op's full present does not have. So a package with an MTP head keeps every
layer's cache whole and applies the window in the graph, which rewinds like any other.

The graph here is one GroupQueryAttention layer over token + position embeddings, built by hand: what is tested
is the runtime's cache, not mtpc's graphs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime_genai as og
import pytest
from onnx import TensorProto, helper, numpy_helper

from mtpc.profiles.ort_genai_0_18 import PROFILE

VOCAB, HIDDEN, HEADS, HEAD, WINDOW, SLACK = 64, 32, 2, 16, 4, 2
PROMPT, STEPS = [5, 9, 13, 20, 33, 40], 24
GEN = np.random.default_rng(1)
WEIGHTS = {"embed": GEN.standard_normal((VOCAB, HIDDEN)), "positions": GEN.standard_normal((512, HIDDEN)),
           **{n: 0.5 * GEN.standard_normal((HIDDEN, HEADS * HEAD if n == "wq" else HEAD)) for n in ("wq", "wk", "wv")},
           "wo": 0.5 * GEN.standard_normal((HEADS * HEAD, HIDDEN)), "lm_head": GEN.standard_normal((HIDDEN, VOCAB))}


def _graph(window_cache: bool) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in WEIGHTS.items()]
    inits += [numpy_helper.from_array(np.array([1], np.int64), "axis_1"),
              numpy_helper.from_array(np.array(1, np.int64), "index_1")]
    attrs = {"num_heads": HEADS, "kv_num_heads": 1, "local_window_size": WINDOW}
    if window_cache:
        attrs["sliding_window_cache"] = 1
    nodes = [helper.make_node("Gather", ["embed", "input_ids"], ["e"]),
             helper.make_node("Gather", ["positions", "position_ids"], ["p"]), helper.make_node("Add", ["e", "p"], ["x"]),
             *(helper.make_node("MatMul", ["x", f"w{t}"], [t]) for t in "qkv"),
             helper.make_node("ReduceSum", ["attention_mask", "axis_1"], ["total"], keepdims=0),
             helper.make_node("Sub", ["total", "axis_1"], ["last"]),
             helper.make_node("Cast", ["last"], ["seqlens_k"], to=TensorProto.INT32),
             helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
             helper.make_node("Gather", ["mask_shape", "index_1"], ["width"], axis=0),
             helper.make_node("Cast", ["width"], ["total_length"], to=TensorProto.INT32),
             helper.make_node("GroupQueryAttention", ["q", "k", "v", "past_key_values.0.key", "past_key_values.0.value",
                                                      "seqlens_k", "total_length"],
                              ["attended", "present.0.key", "present.0.value"], domain="com.microsoft", **attrs),
             helper.make_node("MatMul", ["attended", "wo"], ["o"]), helper.make_node("Add", ["o", "x"], ["y"]),
             helper.make_node("MatMul", ["y", "lm_head"], ["logits"])]
    past = ["batch_size", 1, "past_sequence_length", HEAD]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, past),
              helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, past)]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", VOCAB]),
               *(helper.make_tensor_value_info(f"present.0.{t}", TensorProto.FLOAT, ["batch_size", 1, "present", HEAD])
                 for t in ("key", "value"))]
    graph = helper.make_graph(nodes, "window", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def _reference_greedy() -> list[int]:
    w = WEIGHTS
    tokens = list(PROMPT)
    for _ in range(STEPS):
        x = w["embed"][tokens] + w["positions"][: len(tokens)]
        q, k, v = x[-1] @ w["wq"], x @ w["wk"], x @ w["wv"]
        lo = max(0, len(tokens) - WINDOW)
        heads = []
        for h in range(HEADS):
            scores = k[lo:] @ q[h * HEAD:(h + 1) * HEAD] / np.sqrt(HEAD)
            p = np.exp(scores - scores.max())
            heads.append((p / p.sum()) @ v[lo:])
        logits = (np.concatenate(heads) @ w["wo"] + x[-1]) @ w["lm_head"]
        tokens.append(int(np.argmax(logits)))
    return tokens[len(PROMPT):]


def _package(folder: Path, *, window_cache: bool, share_buffer: bool, sliding_section: bool) -> og.Model:
    folder.mkdir()
    onnx.save(_graph(window_cache), folder / "model.onnx")
    decoder = {"filename": "model.onnx", "session_options": {"provider_options": []}, "hidden_size": HIDDEN,
               "num_attention_heads": HEADS, "num_key_value_heads": 1, "num_hidden_layers": 1, "head_size": HEAD,
               "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask", "position_ids": "position_ids",
                          "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
               "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                           "present_value_names": "present.%d.value"}}
    if sliding_section:  # as the 0.18.0 builder writes it for a windowed CPU cache (builders/base.py)
        decoder["sliding_window"] = {"window_size": WINDOW, "slide_key_value_cache": False, "slide_inputs": False,
                                     "layers": [0], "cache_slack": SLACK}
    config = {"model": {"type": "llama", "vocab_size": VOCAB, "context_length": 512, "pad_token_id": 0,
                        "bos_token_id": 1, "eos_token_id": [2], "decoder": decoder},
              "search": {"max_length": 512, "past_present_share_buffer": share_buffer, "do_sample": False}}
    (folder / "genai_config.json").write_text(json.dumps(config))
    return og.Model(str(folder))


def _generator(model: og.Model) -> og.Generator:
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(PROMPT) + STEPS)
    generator = og.Generator(model, params)
    generator.append_tokens(PROMPT)
    return generator


def _finish(generator: og.Generator) -> list[int]:
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][len(PROMPT):]


def test_a_window_in_the_graph_over_a_full_cache_decodes_and_rewinds(tmp_path):
    model = _package(tmp_path / "full", window_cache=False, share_buffer=False, sliding_section=False)
    assert _finish(_generator(model)) == _reference_greedy()
    generator = _generator(model)
    for _ in range(STEPS - 6):
        generator.generate_next_token()
    generator.rewind_to(len(PROMPT) + STEPS - 8)  # as og.MtpGenerator does after a rejected draft
    assert _finish(generator) == _reference_greedy()


def test_a_window_sized_cache_decodes_but_cannot_rewind_once_it_evicted(tmp_path):
    model = _package(tmp_path / "windowed", window_cache=True, share_buffer=True, sliding_section=True)
    generator = _generator(model)
    assert _finish(generator) == _reference_greedy()
    assert generator.get_output("present.0.key").shape[2] == WINDOW + SLACK  # the window and its slack, not more
    generator = _generator(model)
    for _ in range(STEPS - 6):
        generator.generate_next_token()
    with pytest.raises(Exception, match="sliding-window KV cache holds only the last"):
        generator.rewind_to(len(PROMPT) + STEPS - 8)


def test_a_dynamic_cache_cannot_be_window_sized_for_the_ops_present(tmp_path):
    model = _package(tmp_path / "dynamic", window_cache=False, share_buffer=False, sliding_section=True)
    with pytest.raises(Exception, match="pre-allocated"):
        _finish(_generator(model))


def test_the_profile_says_why_sliding_layers_keep_full_caches():
    assert "rewind" in PROFILE.sliding_kv_cache and "CheckWindowedKvCacheRewind" in PROFILE.sliding_kv_cache
