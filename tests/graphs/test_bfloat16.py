"""bfloat16 graphs (built for CUDA, which has bfloat16 kernels): valid ONNX, and wired right.

onnxruntime's CPU kernels take no bfloat16, so the numbers are proven by other means: a
test-only lowering retypes every bfloat16 tensor of the emitted graph as float32 (the stored
bfloat16 weights widened exactly), and the result must match the numpy reference run on the
same bfloat16-rounded weights. A bfloat16 graph that is wired wrong (a missing cast, a weight
read in the wrong dtype) fails here; the bfloat16 kernels themselves are CUDA's to get right.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from mtpc.reference.forward import Qwen35Reference
from mtpc.sources.random_weights import seeded_store
from mtpc.weights import ArrayWeightStore

from .tiny import emit, empty_state, make_ir, run, session

BF16, F32 = onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT
PROMPT = np.array([[3, 17, 42, 9, 250, 1]], np.int64)


def widened(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every bfloat16 initializer, value type and Cast target of `model` as float32 (test-only)."""
    graph = model.graph
    for i, init in enumerate(list(graph.initializer)):
        if init.data_type == BF16:
            graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.tensor_type.elem_type == BF16:
            value.type.tensor_type.elem_type = F32
    for node in graph.node:
        for attr in node.attribute:
            if attr.name == "to" and attr.i == BF16:
                attr.i = F32
    return model


def test_bfloat16_graph_passes_onnx_full_check_and_matches_the_reference_when_widened(arch, tmp_path):
    store = seeded_store(arch, 0)
    emit(make_ir(arch, heads=(), io_dtype="bfloat16"), store, tmp_path / "pkg")
    model = onnx.load(str(tmp_path / "pkg" / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert {i.type.tensor_type.elem_type for i in model.graph.output} == {BF16}
    bf16_weights = [i for i in model.graph.initializer if i.data_type == BF16 and len(i.dims) == 2]
    assert bf16_weights  # the weights really are stored in bfloat16

    # The linear-attention gate parameters stay float32 in every graph (the recurrence's decay is sensitive).
    float32_kept = {i.name.split("model.", 1)[-1] for i in model.graph.initializer if i.data_type == F32}
    assert float32_kept == {"rotary/inv_freq"} | {f"layers.{i}.linear_attn.{p}" for i in (0, 2)
                                                   for p in ("dt_bias", "decay_scale")}
    onnx.save(widened(model), str(tmp_path / "widened.onnx"))
    sess = session(tmp_path / "widened.onnx")
    out = run(sess, {"input_ids": PROMPT, "attention_mask": np.ones_like(PROMPT),
                     "position_ids": np.broadcast_to(np.arange(6), (3, 1, 6)).astype(np.int64),
                     **empty_state(sess, 1)})
    rounded = {
        n: store.read_float(n) if n in float32_kept else store.read_float(n).astype(ml_dtypes.bfloat16).astype(np.float32)
        for n in store.names()
    }
    logits, _, _, _ = Qwen35Reference(arch, ArrayWeightStore(rounded)).forward(PROMPT)
    np.testing.assert_allclose(out["logits"], logits, atol=2e-4, rtol=0)
