"""`targets` (schema defaults filled in) -> the typed `Targets`; each runtime's limits are its profile's to check."""

from __future__ import annotations

from ..ir import AttentionMode, OnnxGenaiTarget, OrtGenaiTarget, Targets
from ..profiles import ort_genai_profile


def targets_of(targets: dict) -> Targets:
    ort = targets.get("onnxruntime_genai")
    onnx_genai = targets.get("onnx_genai")
    return Targets(
        onnxruntime_genai=ort_target(ort) if ort is not None else None,
        onnx_genai=onnx_genai_target(onnx_genai) if onnx_genai is not None else None,
    )


def onnx_genai_target(onnx_genai: dict) -> OnnxGenaiTarget:
    return OnnxGenaiTarget(layout=onnx_genai["layout"])


def ort_target(ort: dict) -> OrtGenaiTarget:
    attention = AttentionMode(ort["attention"])
    paged = ort["paged"]
    num_blocks = paged.get("num_blocks")
    utilization = paged.get("gpu_utilization_factor")
    if attention is AttentionMode.PAGED and num_blocks is None and utilization is None:
        utilization = ort_genai_profile(ort["version"]).default_gpu_utilization_factor
    return OrtGenaiTarget(
        version=ort["version"],
        execution_provider=ort["execution_provider"],
        attention=attention,
        block_size=paged["block_size"],
        max_batch_size=paged["max_batch_size"],
        num_blocks=num_blocks,
        gpu_utilization_factor=float(utilization) if utilization is not None else None,
        max_draft_tokens=ort["max_draft_tokens"],
        prune_lm_head=paged["prune_lm_head"],
        kv_cache=ort["kv_cache"],
        state_window=ort["state_window"],
    )
