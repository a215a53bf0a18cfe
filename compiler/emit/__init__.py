"""Emitters: pure functions `(ir, ctx) -> list[Artifact]` from the final IR to the package's files.

An emitter never touches the file system. It returns `Artifact`s; the driver
validates each against its schema and sorts them by path, and
`mtpc.output.write.write_package` (called by `mtpc compile`) writes them all
atomically. Large tensor data is produced lazily through `Artifact.chunks` so
a model's weights stream into `.onnx.data` without being held in memory.

`EMITTERS` (at the end of this module) lists every emitter in the order they
run: a later one may read what an earlier one recorded in the `EmitContext`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .artifact import Emitter


def __getattr__(name: str):
    """`EMITTERS`, imported on first use: the metadata verbs (and `checks`, which reads this module's
    file names) never build a graph, so they need not import the graph builders and onnx_ir."""
    if name != "EMITTERS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The emitter modules import the names above, so they are imported only now.
    from .graph_files import emit_graph_files
    from .genai_config import emit_genai_config
    from .processor_config import emit_processor_config
    from .inference_metadata import emit_inference_metadata
    from .tokenizer import emit_tokenizer
    from .quantization_report import emit_quantization_report
    from .model_card import emit_model_card
    from .provenance import emit_provenance

    # In running order: onnx_graphs records the data layouts genai_config reads.
    emitters: tuple[tuple[str, Emitter], ...] = (
        ("onnx_graphs", emit_graph_files),
        ("genai_config", emit_genai_config),
        ("processor_config", emit_processor_config),
        ("inference_metadata", emit_inference_metadata),
        ("tokenizer", emit_tokenizer),
        ("quantization_report", emit_quantization_report),
        ("model_card", emit_model_card),
        ("provenance", emit_provenance),
    )
    globals()["EMITTERS"] = emitters
    return emitters
