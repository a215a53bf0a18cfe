"""Attention by a layer's own geometry (`graphs/attention.py`, `reference/primitives.causal_attention`): a sliding
window, sinks, a value head narrower than the key head, its own head counts.

The independent rendition is transformers' own: MiMo-V2-Flash's `eager_attention_forward` (sinks appended to
each softmax row and dropped) under the mask transformers builds for a sliding layer (`causal_mask_function` and
`sliding_window_overlay`: `kv > q - W`), over the whole sequence at once. Both graph forms (GroupQueryAttention
with `local_window_size` / `head_sink`, and the plain-op form over the last W + S - 1 cached tokens) and the numpy
reference must give its rows for a prompt fed in chunks longer than the window, then decoded token by token.
A window one token wider, or the sinks left out, parts from it (the convention is what is tested).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx_ir as oir
import onnxruntime as ort
import pytest

from mtpc.graphs.attention import attend
from mtpc.graphs.builder import GraphBuilder, GraphData
from mtpc.graphs.initializers import DataFile
from mtpc.graphs.parameters import ParameterSource
from mtpc.graphs.sequence import DenseOps
from mtpc.ir import GraphContract, LayerAttention, QuantizationPlan, Rope, TensorSpec
from mtpc.profiles.kernels import fused_kernels
from mtpc.reference.primitives import causal_attention
from mtpc.weights import ArrayWeightStore

HEADS, KV_HEADS, HEAD, VALUE, WINDOW = 4, 2, 8, 6, 5
CHUNKS = (7, 3, 1, 1, 1)  # 13 tokens: a prompt longer than the window, a chunk after it, then decoding


def _layer(**changes) -> LayerAttention:
    layer = LayerAttention(HEADS, KV_HEADS, HEAD, VALUE, Rope(10000.0, 1.0, HEAD, position_rows=False),
                           window=WINDOW, sinks=True)
    return replace(layer, **changes)


def _tensors(total: int, seed: int = 0) -> dict[str, np.ndarray]:
    gen = np.random.default_rng(seed)
    return {"q": gen.standard_normal((1, total, HEADS, HEAD)), "k": gen.standard_normal((1, total, KV_HEADS, HEAD)),
            "v": gen.standard_normal((1, total, KV_HEADS, VALUE)), "sinks": gen.standard_normal(HEADS)}


def _transformers(t: dict[str, np.ndarray], window: int | None, sinks: bool) -> np.ndarray:
    """[total, NH*VD]: transformers' sliding mask and MiMo-V2-Flash's eager attention with sinks."""
    import torch
    from transformers.masking_utils import and_masks, causal_mask_function, sliding_window_overlay
    from transformers.models.mimo_v2_flash.modeling_mimo_v2_flash import eager_attention_forward

    total = t["q"].shape[1]
    mask_fn = causal_mask_function if window is None else and_masks(causal_mask_function, sliding_window_overlay(window))
    q_idx, kv_idx = torch.arange(total)[:, None], torch.arange(total)[None, :]
    allowed = mask_fn(0, 0, q_idx, kv_idx)
    additive = torch.where(allowed, 0.0, float("-inf")).to(torch.float64)[None, None]

    class Module(torch.nn.Module):
        num_key_value_groups = HEADS // KV_HEADS
        training = False

    module = Module()
    module.sinks = torch.from_numpy(t["sinks"]) if sinks else None
    query, key, value = (torch.from_numpy(t[n]).transpose(1, 2) for n in ("q", "k", "v"))
    out, _ = eager_attention_forward(module, query, key, value, additive, scaling=HEAD**-0.5)
    return out.reshape(total, HEADS * VALUE).numpy()


def _graph(layer: LayerAttention, windowed_kernel: bool) -> ort.InferenceSession:
    """q / k / v, the caches and the mask in; `attend`'s output and presents out; sinks as an input."""
    params = ParameterSource(ArrayWeightStore({}), QuantizationPlan(), "float32", ())
    kernels = replace(fused_kernels("cpu"), window_group_query_attention=windowed_kernel)
    b = GraphBuilder("attention", params, GraphData("attention.onnx", DataFile("attention.onnx.data")), kernels)
    dims = ("batch", "sequence")
    contract = GraphContract(
        (TensorSpec("q", "float32", (*dims, HEADS * HEAD)), TensorSpec("k", "float32", (*dims, KV_HEADS * HEAD)),
         TensorSpec("v", "float32", (*dims, KV_HEADS * VALUE)), TensorSpec("sinks", "float32", (HEADS,)),
         TensorSpec("past_key", "float32", ("batch", KV_HEADS, "past", HEAD)),
         TensorSpec("past_value", "float32", ("batch", KV_HEADS, "past", HEAD)),
         TensorSpec("attention_mask", "int64", ("batch", "total"))),
        (TensorSpec("out", "float32", (*dims, HEADS * VALUE)),
         TensorSpec("present_key", "float32", ("batch", KV_HEADS, "total", HEAD)),
         TensorSpec("present_value", "float32", ("batch", KV_HEADS, "total", HEAD))))
    b.declare_inputs(contract)
    i = b.inputs
    ops = DenseOps(b, i["attention_mask"])
    out, key, value = attend(b, ops, i["q"], i["k"], i["v"], i["past_key"], i["past_value"], layer,
                             i["sinks"] if layer.sinks else None)
    model = b.finish(contract, {"out": out, "present_key": key, "present_value": value}).model
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(oir.serde.serialize_model(model).SerializeToString(), options, providers=["CPUExecutionProvider"])


def _chunked(run, t: dict[str, np.ndarray]) -> np.ndarray:
    """`run(q, k, v, past, start)` over CHUNKS, the outputs stacked: [total, NH*VD]."""
    rows, past, start = [], None, 0
    for size in CHUNKS:
        piece = {n: t[n][:, start : start + size] for n in ("q", "k", "v")}
        out, past = run(piece["q"], piece["k"], piece["v"], past, start)
        rows.append(np.asarray(out).reshape(size, -1))
        start += size
    return np.concatenate(rows)


def _graph_rows(layer: LayerAttention, windowed_kernel: bool, t: dict[str, np.ndarray]) -> np.ndarray:
    session = _graph(layer, windowed_kernel)
    names = [o.name for o in session.get_outputs()]

    def run(q, k, v, past, start):
        s = q.shape[1]
        if past is None:
            past = (np.zeros((1, KV_HEADS, 0, HEAD), np.float32),) * 2
        feeds = {"q": q.reshape(1, s, -1), "k": k.reshape(1, s, -1), "v": v.reshape(1, s, -1),
                 "past_key": past[0], "past_value": past[1], "attention_mask": np.ones((1, start + s), np.int64),
                 "sinks": t["sinks"]}  # an input of the graph, read only by a layer with sinks
        result = dict(zip(names, session.run(names, {n: np.asarray(x, np.float32) if x.dtype.kind == "f" else x
                                                    for n, x in feeds.items()})))
        return result["out"], (result["present_key"], result["present_value"])

    return _chunked(run, t)


def _reference_rows(t: dict[str, np.ndarray], window: int | None, sinks: bool) -> np.ndarray:
    def run(q, k, v, past, start):
        return causal_attention(q, k, v, past, HEADS // KV_HEADS, window=window, sinks=t["sinks"] if sinks else None)

    return _chunked(run, t)


@pytest.mark.parametrize("sinks", [True, False])
def test_the_reference_attends_as_transformers(sinks):
    t = _tensors(sum(CHUNKS))
    expected = _transformers(t, WINDOW, sinks)
    np.testing.assert_allclose(_reference_rows(t, WINDOW, sinks), expected, rtol=0, atol=1e-12)
    # The window counts the query's own token: one token wider (or none) is another attention.
    assert np.abs(_reference_rows(t, WINDOW + 1, sinks) - expected).max() > 1e-2
    assert np.abs(_reference_rows(t, None, sinks) - expected).max() > 1e-2


@pytest.mark.parametrize("windowed_kernel", [True, False], ids=["group_query_attention", "plain_ops"])
@pytest.mark.parametrize("sinks", [True, False])
def test_both_graph_forms_attend_as_transformers(windowed_kernel, sinks):
    t = _tensors(sum(CHUNKS), seed=1)
    expected = _transformers(t, WINDOW, sinks)
    got = _graph_rows(_layer(sinks=sinks), windowed_kernel, t)
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6)
    wider = _graph_rows(_layer(sinks=sinks, window=WINDOW + 1), windowed_kernel, t)
    assert np.abs(wider - expected).max() > 1e-2
    if sinks:  # the sinks are read: without them the rows differ
        assert np.abs(_transformers(t, WINDOW, False) - expected).max() > 1e-2


def test_a_full_attention_layer_with_a_narrower_value_head_attends_over_everything():
    t = _tensors(sum(CHUNKS), seed=2)
    expected = _transformers(t, None, False)
    np.testing.assert_allclose(_graph_rows(_layer(window=None, sinks=False), True, t), expected, rtol=0, atol=2e-6)
    np.testing.assert_allclose(_reference_rows(t, None, False), expected, rtol=0, atol=1e-12)
