"""Attention alone, one decoded token over T cached tokens, in the three MLA forms bench/mla_forms.py compares.

Each builder returns a zero-argument runner (one onnxruntime call) over a one-node-or-so graph:

- `gqa`: GroupQueryAttention, num_heads H, kv_num_heads 1, head `latent` (what mtpc's GQA form runs);
- `plain`: the plain-op form of graphs/latent_attention.py (Concat the new latent, scale, MatMul against the
  transposed cache, Where over the mask, Softmax, MatMul), the mask given as the bool input the graph builds
  once per step for all layers;
- `decompressed`: GroupQueryAttention, H query heads and H KV heads of `head` (per-head keys and values).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

F = TensorProto.FLOAT


def _runner(graph, feeds: dict, threads: int):
    import onnxruntime as ort

    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feeds)


def _gqa(context: int, threads: int, heads: int, kv_heads: int, head: int):
    gen = np.random.default_rng(0)
    inputs = [helper.make_tensor_value_info("q", F, [1, 1, heads * head]),
              helper.make_tensor_value_info("k", F, [1, 1, kv_heads * head]),
              helper.make_tensor_value_info("v", F, [1, 1, kv_heads * head]),
              helper.make_tensor_value_info("past_k", F, [1, kv_heads, context, head]),
              helper.make_tensor_value_info("past_v", F, [1, kv_heads, context, head]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
              helper.make_tensor_value_info("total", TensorProto.INT32, [])]
    node = helper.make_node("GroupQueryAttention", [i.name for i in inputs], ["out", "present_k", "present_v"],
                            domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, do_rotary=0,
                            scale=0.0625)
    outputs = [helper.make_tensor_value_info(n, F, None) for n in ("out", "present_k", "present_v")]
    graph = helper.make_graph([node], "gqa", inputs, outputs)
    feeds = {"q": gen.standard_normal((1, 1, heads * head), np.float32),
             "k": gen.standard_normal((1, 1, kv_heads * head), np.float32),
             "v": gen.standard_normal((1, 1, kv_heads * head), np.float32),
             "past_k": gen.standard_normal((1, kv_heads, context, head), np.float32),
             "past_v": gen.standard_normal((1, kv_heads, context, head), np.float32),
             "seqlens_k": np.asarray([context], np.int32), "total": np.asarray(context + 1, np.int32)}
    return _runner(graph, feeds, threads)


def _plain(context: int, threads: int, heads: int, latent: int):
    gen = np.random.default_rng(0)
    c = lambda name, value: helper.make_tensor(name, TensorProto.INT64 if value.dtype == np.int64 else F,  # noqa: E731
                                               value.shape, value.flatten().tolist())
    inits = [c("axis_1", np.asarray([1], np.int64)), c("rows", np.asarray([0, -1, latent], np.int64)),
             c("tokens", np.asarray([0, -1, heads * latent], np.int64)), c("scale", np.asarray(0.0625, np.float32)),
             c("lowest", np.asarray(np.finfo(np.float32).min, np.float32))]
    nodes = [helper.make_node("Unsqueeze", ["latent", "axis_1"], ["new"]),
             helper.make_node("Concat", ["past_k", "new"], ["present_k"], axis=2),
             helper.make_node("Concat", ["past_v", "new"], ["present_v"], axis=2),
             helper.make_node("Reshape", ["present_k", "rows"], ["keys"]),
             helper.make_node("Reshape", ["present_v", "rows"], ["values"]),
             helper.make_node("Mul", ["q", "scale"], ["q_scaled"]),
             helper.make_node("Reshape", ["q_scaled", "rows"], ["q_rows"]),
             helper.make_node("Transpose", ["keys"], ["keys_t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q_rows", "keys_t"], ["scores"]),
             helper.make_node("Where", ["allowed", "scores", "lowest"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
             helper.make_node("MatMul", ["probs", "values"], ["out_rows"]),
             helper.make_node("Reshape", ["out_rows", "tokens"], ["out"])]
    inputs = [helper.make_tensor_value_info("q", F, [1, 1, heads * latent]),
              helper.make_tensor_value_info("latent", F, [1, 1, latent]),
              helper.make_tensor_value_info("past_k", F, [1, 1, context, latent]),
              helper.make_tensor_value_info("past_v", F, [1, 1, context, latent]),
              helper.make_tensor_value_info("allowed", TensorProto.BOOL, [1, heads, context + 1])]
    outputs = [helper.make_tensor_value_info(n, F, None) for n in ("out", "present_k", "present_v")]
    graph = helper.make_graph(nodes, "plain", inputs, outputs, initializer=inits)
    feeds = {"q": gen.standard_normal((1, 1, heads * latent), np.float32),
             "latent": gen.standard_normal((1, 1, latent), np.float32),
             "past_k": gen.standard_normal((1, 1, context, latent), np.float32),
             "past_v": gen.standard_normal((1, 1, context, latent), np.float32),
             "allowed": np.ones((1, heads, context + 1), bool)}
    return _runner(graph, feeds, threads)


def attention_only(form: str, context: int, threads: int, heads: int, latent: int):
    """The absorbed attention alone in `form` ("gqa" or "plain")."""
    if form == "gqa":
        return _gqa(context, threads, heads, 1, latent)
    return _plain(context, threads, heads, latent)


def decompressed_attention(context: int, threads: int, heads: int, head: int):
    """Per-head keys and values: `heads` KV heads of `head` channels each."""
    return _gqa(context, threads, heads, heads, head)
