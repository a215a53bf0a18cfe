"""Emit the ONNX graphs: the main decoder and one graph per MTP head contract, with their data files.

Each `.onnx` holds the graph with external-data references (locations relative
to the `.onnx` file); the `.onnx.data` files stream the weights one source tensor
at a time from the weight store, only when the artifact is written.

One copy of the weights the main model and the onnxruntime-genai head both read
(embedding, LM head): they live in the head's data file (`mtp/mtp.onnx.data`),
which the main graph names as `mtp/mtp.onnx.data` and the head as `mtp.onnx.data` (a head with its
own LM head, `mtp.lm_head: own`, shares the embedding only).
The other direction is closed: onnxruntime refuses external data outside the
model's folder ("External data path escapes model directory" for
`../model.onnx.data`), and og.MtpGenerator loads the head from a folder of its own.
The layout of the shareable tensors is recorded in `ctx.data_layouts` (and which
file the main graph reads them from in `ctx.shared_data_files`) for genai_config.
"""

from __future__ import annotations

from dataclasses import replace

import onnx_ir as oir

from ..ir.contracts import EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER
from ..graphs.builder import BuiltGraph, GraphData
from ..graphs.initializers import DataFile
from ..graphs.mtp_head import build_head
from ..graphs.parameters import ParameterSource
from ..graphs.families import main_builder
from ..graphs.vision import build_embedding, build_vision
from ..ir import AttentionMode, DecoderConfig, HeadContract, ModelIR
from ..profiles.kernels import fused_kernels
from .artifact import Artifact, EmitContext

LM_HEAD_PREFIX = LM_HEAD_INITIALIZER.removesuffix("weight")  # "lm_head.MatMul."


def is_shareable(name: str) -> bool:
    """Initializers the main model and its head hold under the same name and value (float or quantized)."""
    return name == EMBEDDING_INITIALIZER or name.startswith((EMBEDDING_INITIALIZER + "_", LM_HEAD_PREFIX))


def emit_onnx_graphs(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    params = ParameterSource(
        ctx.weights, ir.quantization, ir.precision.io_dtype, ir.weights, ctx.requantization_error
    )
    og_head = ir.head(HeadContract.ORT_GENAI)
    head_file = DataFile(og_head.filename + ".data") if og_head is not None else None

    def kernels(cfg: DecoderConfig):
        return fused_kernels(cfg.execution_provider, packed_tokens=cfg.attention is AttentionMode.PAGED,
                             io_dtype=ir.precision.io_dtype)

    built: list[tuple[str, BuiltGraph]] = []
    # A head with an LM head of its own (`mtp.lm_head.weight`) reads only the embedding from the main model.
    def head_reads(name: str) -> bool:
        return is_shareable(name) and not (ir.mtp.own_lm_head and name.startswith(LM_HEAD_PREFIX))

    main_file = DataFile(ir.main.filename + ".data")
    build_main = main_builder(ir.architecture)
    built.append((ir.main.filename, build_main(ir, params, GraphData(ir.main.filename, main_file, head_file, head_reads),
                                               ctx.progress, kernels(ir.main))))
    if ir.onnx_genai_main is not None:
        # The same weights as the main graph, every one already placed in its data file: nothing new is written.
        other = ir.onnx_genai_main
        built.append((other.filename, build_main(replace(ir, main=other), params,
                                                 GraphData(other.filename, main_file, head_file, head_reads),
                                                 ctx.progress, kernels(other))))
    if head_file is not None:
        ctx.shared_data_files[ir.main.filename] = head_file.relpath
    for kind, cfg in ir.heads:
        own = head_file if kind is HeadContract.ORT_GENAI and head_file is not None else DataFile(cfg.filename + ".data")
        built.append((cfg.filename, build_head(ir, kind, cfg, params, GraphData(cfg.filename, own), ctx.progress,
                                               kernels(cfg))))
    if ir.vision is not None:
        # The multimodal pipeline: the tower in a data file of its own; the embedding graph and the decoder
        # on inputs_embeds read the text model's tensors where the graphs above placed them (one copy).
        v = ir.vision
        ctx.progress(f"{v.vision_filename}: the vision tower")
        built.append((v.vision_filename, build_vision(ir, params, GraphData(v.vision_filename,
                                                                           DataFile(v.vision_filename + ".data")))))
        built.append((v.embedding_filename, build_embedding(ir, params, GraphData(v.embedding_filename, main_file,
                                                                                  head_file, head_reads))))
        built.append((v.decoder.filename, build_main(replace(ir, main=v.decoder), params,
                                                     GraphData(v.decoder.filename, main_file, head_file, head_reads),
                                                     ctx.progress, kernels(v.decoder))))

    # Data files are laid out only once every graph that places tensors in them is built.
    artifacts: list[Artifact] = []
    for filename, graph in built:
        proto = oir.serde.serialize_model(graph.model)
        artifacts.append(Artifact(filename, content=proto.SerializeToString(deterministic=True)))
        data = graph.data
        if data.relpath in ctx.data_layouts:  # a data file two graphs read is written once
            continue
        if data.groups:
            artifacts.append(Artifact(data.relpath, chunks=lambda data=data: data.chunks(ctx.jobs), size=data.size))
        ctx.data_layouts[data.relpath] = {k: v for k, v in data.layout().items() if is_shareable(k)}
    return artifacts
