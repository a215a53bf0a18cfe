"""The MoE / QMoE ops' own `relu2` activation (CUDA kernels only in onnxruntime 1.32) lowered to what the CPU kernels
run: the SwiGLU form over FC1's rows twice (`[u0, u0, u1, u1, ...]`) with alpha `graphs.moe.RELU2_ALPHA`, which
`u * sigmoid(alpha * u) * u` makes relu(u)^2 within 5e-9. Written from the op's contract (FC1 `[E, I, H]` the up
rows alone, relu(x @ up^T)^2 before FC2), so a CUDA graph's expert wiring runs on CPU against the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mtpc.graphs.moe import RELU2_ALPHA


def _activation(node: onnx.NodeProto) -> str:
    return next((helper.get_attribute_value(a).decode() for a in node.attribute if a.name == "activation_type"), "")


def _doubled_rows(tensor: onnx.TensorProto, base: Path, name: str) -> onnx.TensorProto:
    value = numpy_helper.to_array(tensor, str(base))  # [E, I, ...]
    e, i = value.shape[:2]
    return numpy_helper.from_array(np.stack([value, value], axis=2).reshape(e, 2 * i, *value.shape[2:]), name)


def lower_model(model: onnx.ModelProto, base: Path) -> onnx.ModelProto:
    """`model` (its external data under `base`) with every relu2 MoE / QMoE of its main graph in the SwiGLU form."""
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type not in ("MoE", "QMoE") or _activation(node) != "relu2":
            continue
        # MoE: fc1 is input 2; QMoE: fc1 weights 2 and scales 3 (rows alike).
        for index in ((2,) if node.op_type == "MoE" else (2, 3)):
            doubled = f"{node.input[index]}/doubled"
            graph.initializer.append(_doubled_rows(initializers[node.input[index]], base, doubled))
            node.input[index] = doubled
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "activation_type"}
        attrs.update(activation_type="swiglu", swiglu_fusion=1, activation_alpha=RELU2_ALPHA, activation_beta=0.0)
        del node.attribute[:]
        node.attribute.extend(helper.make_attribute(k, v) for k, v in sorted(attrs.items()))
    return model
