"""The ONNX graph files of a package, built now (`onnx_graphs`) or on first read.

`compile` builds the graphs here and the contract checks read them. A verb that writes
nothing (`check SPEC`, `plan`) asks for them deferred (`EmitContext.defer_graphs`): each
`.onnx` becomes a deferred artifact carrying the I/O contract it is built to
(`Artifact.interface`), and its data file a streamed one; reading either builds every
graph once (onnx_ir is imported only then). The file names are the IR's (the builder
writes one graph per decoder config, each with a data file named after it), and building
checks it wrote exactly those, so a deferred package lists the files a built one holds.

Deferring is declined where another emitter reads what building records: the
`shared_initializers` genai_config writes from the data layouts.

`graph_inputs` is what the graph files are a function of: the IR less what only the documents
say (the spec's name and file, the notes, the spec's quantization rules and which rule chose
each weight's stored form; the stored forms themselves stay) and less the runtime settings (the
targets, the MTP head policy and draft count). The graph builders read no target: what a target
decides for a graph (its execution provider's kernels, paged I/O, a static KV cache, the state
updates `max_draft_tokens` sizes) the passes have already written into the decoder configs and
the weight table, which stay. Two IRs with equal graph inputs compile to byte-identical `.onnx`
files, so `diff SPEC SPEC` need not build them to know they do not differ (tests/emit/
test_graph_files.py builds every shipped spec's graphs from an IR whose left-out fields are all
changed, and compares the bytes).
"""

from __future__ import annotations

from dataclasses import fields, replace
from functools import lru_cache
from typing import Callable

from ..ir import GraphContract, HeadPolicy, ModelIR, QuantizationPlan, Targets
from .artifact import Artifact, EmitContext
from .genai_config import reads_data_layouts


def graph_inputs(ir: ModelIR) -> ModelIR:
    """The IR as the graph builders see it (compare two with `==`): what only the documents and the
    runtimes read is blanked."""
    return replace(_blanked(ir), weights=tuple(replace(w, rule="") for w in ir.weights))


def _blanked(ir: ModelIR) -> ModelIR:
    """`ir` less every field no graph builder reads, its weight table included (compared apart)."""
    mtp = replace(ir.mtp, head=HeadPolicy.AUTO, num_speculative_tokens=0)
    return replace(ir, name="", spec_path=None, notes=(), quantization=QuantizationPlan(), targets=Targets(), mtp=mtp,
                   weights=())


def same_graph_inputs(a: ModelIR, b: ModelIR) -> bool:
    """`graph_inputs(a) == graph_inputs(b)`, told without making either: the IRs less the fields no graph
    reads, then the weights pair by pair less their rule (a model's hundreds of weights are not copied)."""
    if len(a.weights) != len(b.weights):
        return False
    if _blanked(a) != _blanked(b):
        return False
    for x, y in zip(a.weights, b.weights):
        if type(x) is not type(y):
            return False
        compared = _compared_weight_fields(type(x))
        if compared(x) != compared(y):
            return False
    return True


@lru_cache(maxsize=None)
def _compared_weight_fields(cls: type) -> Callable[[object], tuple]:
    # The tuple the dataclass's == compares, less the rule (`graph_inputs` blanks it).
    names = [f.name for f in fields(cls) if f.compare and f.name != "rule"]
    return lambda w: tuple(getattr(w, name) for name in names)


def graph_files(ir: ModelIR) -> list[tuple[str, str, GraphContract]]:
    """(graph, its data file, its contract) for every graph the package holds, main model first."""
    # Each graph's data file is named after it; the onnxruntime-genai head's also holds the tensors the
    # main model shares with it, which adds no file.
    files = [(cfg.filename, cfg.filename + ".data", cfg.contract) for cfg in (ir.main, *(cfg for _, cfg in ir.heads))]
    if ir.onnx_genai_main is not None:  # onnx-genai's own main graph reads the main graph's data file
        files.insert(1, (ir.onnx_genai_main.filename, ir.main.filename + ".data", ir.onnx_genai_main.contract))
    if ir.vision is not None:  # the multimodal pipeline: the tower's own data; the others read the text model's
        v = ir.vision
        files += [(v.vision_filename, v.vision_filename + ".data", v.vision),
                  (v.embedding_filename, ir.main.filename + ".data", v.embedding),
                  (v.decoder.filename, ir.main.filename + ".data", v.decoder.contract)]
    return files


def emit_graph_files(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    if not ctx.defer_graphs or reads_data_layouts(ir):
        from .onnx_graphs import emit_onnx_graphs

        return emit_onnx_graphs(ir, ctx)
    built: dict[str, Artifact] = {}
    expected = graph_files(ir)

    def made(relpath: str) -> Artifact:
        if not built:
            from .onnx_graphs import emit_onnx_graphs

            artifacts = {a.relpath: a for a in emit_onnx_graphs(ir, ctx)}
            names = sorted({name for graph, data, _ in expected for name in (graph, data)})
            if sorted(artifacts) != names:
                raise AssertionError(f"the graph emitter wrote {sorted(artifacts)}, the deferred package listed {names}")
            built.update(artifacts)
        return built[relpath]

    artifacts, data_files = [], set()
    for graph, data, contract in expected:
        artifacts.append(Artifact(graph, chunks=lambda graph=graph: made(graph).iter_bytes(), deferred=True,
                                  interface=contract))
        if data not in data_files:
            data_files.add(data)
            artifacts.append(Artifact(data, chunks=lambda data=data: made(data).iter_bytes()))
    return artifacts
