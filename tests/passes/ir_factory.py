"""ModelIR values built directly (no spec file) for pass and emitter tests."""

from __future__ import annotations

from dataclasses import replace

from mtpc.ir.contracts import main_decoder_config
from mtpc.ir import (
    AttentionMode,
    HeadPolicy,
    ModelIR,
    MtpSettings,
    OnnxGenaiTarget,
    OrtGenaiTarget,
    Precision,
    QuantizationPlan,
    SourceRef,
    SourceTensor,
    Targets,
)
from mtpc.passes import default_pipeline
from mtpc.weights import canonical_shapes

from tests.fixtures.arch import tiny_arch

CPU_DENSE = OrtGenaiTarget(execution_provider="cpu", attention=AttentionMode.DENSE)
CUDA_DENSE = OrtGenaiTarget(execution_provider="cuda", attention=AttentionMode.DENSE)
CUDA_PAGED = OrtGenaiTarget(execution_provider="cuda", attention=AttentionMode.PAGED, block_size=16, max_batch_size=8)


def make_ir(
    *,
    arch=None,
    head: HeadPolicy = HeadPolicy.AUTO,
    ort: OrtGenaiTarget | None = CPU_DENSE,
    onnx_genai: OnnxGenaiTarget | None = None,
    io_dtype: str | None = None,
) -> ModelIR:
    """A freshly lowered IR; io dtype defaults to float16 for a paged target (what it needs)."""
    arch = arch or tiny_arch()
    if io_dtype is None:
        io_dtype = "float16" if ort is not None and ort.attention is AttentionMode.PAGED else "float32"
    precision = Precision(io_dtype=io_dtype)
    provider = ort.execution_provider if ort is not None else "cpu"
    return ModelIR(
        name="tiny",
        spec_path=None,
        source=SourceRef(kind="synthetic", seed=0),
        architecture=arch,
        mtp=MtpSettings(head=head),
        precision=precision,
        quantization=QuantizationPlan(),
        targets=Targets(onnxruntime_genai=ort, onnx_genai=onnx_genai),
        main=main_decoder_config(arch, precision, execution_provider=provider),
        source_tensors=tuple(SourceTensor(n, shape, "float32") for n, shape in sorted(canonical_shapes(arch).items())),
    )


def compiled(**kw) -> ModelIR:
    """`make_ir` after the whole pass pipeline."""
    return default_pipeline().run(make_ir(**kw))


def decided(ir: ModelIR, emit_head: bool) -> ModelIR:
    """An IR as HeadDetection would leave it, for passes tested on their own."""
    return replace(ir, mtp=replace(ir.mtp, emit_head=emit_head))
