"""Emit the ONNX graphs: the main decoder and one graph per MTP head contract, each with its data file.

Each `.onnx` holds the graph with external-data references (locations relative
to the `.onnx` file); its `.onnx.data` streams the weights one source tensor at
a time from the weight store, only when the artifact is written. The layout of
the tensors runtimes may share (embedding, LM head) is recorded in
`ctx.data_layouts` for genai_config.
"""

from __future__ import annotations

import posixpath

import onnx_ir as oir

from ..contracts import EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER
from ..graphs.builder import BuiltGraph
from ..graphs.mtp_head import build_head
from ..graphs.parameters import ParameterSource
from ..graphs.qwen35 import build_main
from ..ir import ModelIR
from . import Artifact, EmitContext

LM_HEAD_PREFIX = LM_HEAD_INITIALIZER.removesuffix("weight")  # "lm_head.MatMul."


def is_shareable(name: str) -> bool:
    """Initializers the main model and its head hold under the same name and value (float or quantized)."""
    return name == EMBEDDING_INITIALIZER or name.startswith((EMBEDDING_INITIALIZER + "_", LM_HEAD_PREFIX))


def emit_onnx_graphs(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    params = ParameterSource(
        ctx.weights, ir.quantization, ir.precision.io_dtype, ir.weights, ctx.requantization_error
    )
    artifacts: list[Artifact] = []

    def add(filename: str, build) -> None:
        data_relpath = filename + ".data"
        built: BuiltGraph = build(posixpath.basename(data_relpath))
        proto = oir.serde.serialize_model(built.model)
        artifacts.append(Artifact(filename, content=proto.SerializeToString(deterministic=True)))
        artifacts.append(Artifact(data_relpath, chunks=built.data.chunks, size=built.data.size))
        ctx.data_layouts[data_relpath] = {k: v for k, v in built.data.layout().items() if is_shareable(k)}

    add(ir.main.filename, lambda location: build_main(ir, params, location, ctx.progress))
    for kind, cfg in ir.heads:
        add(cfg.filename, lambda location, kind=kind, cfg=cfg: build_head(ir, kind, cfg, params, location,
                                                                          ctx.progress))
    return artifacts
