"""`processor_config.json`: onnxruntime-genai's image processor for the package's vision tower.

0.18.0 has no Qwen3.5 processor of its own: `qwen3_5` / `qwen3_5_moe` get the shared Qwen one
(`QwenImageProcessor`, src/models/model.cpp), which runs the onnxruntime-extensions pipeline this file
describes and then expands each `<|vision_start|>` into `t*h*w / merge^2` `<|image_pad|>` tokens
(src/models/qwen2_5_vl_image_processor.cpp). The steps are the checkpoint's `preprocessor_config.json`
(transformers' Qwen2VLImageProcessor) in the extensions' terms: decode, RGB, Resize with `smart_resize`
to multiples of patch x merge within [min_pixels, max_pixels], rescale, normalize, PatchImage.

Normalize carries `qwen3_vl: 1`: without it the extensions' Normalize leaves the pixels off by 2.0 for
mean / std 0.5 (measured on 0.18.0). With it, and away from sides whose size / (patch x merge) ends in .5
(80 x 112: the extensions round half away from zero, Python's round() to even), the pixels, grids and
expanded ids equal transformers' processor's (tests/vision/test_processor.py).
"""

from __future__ import annotations

import json

from ..ir import ModelIR
from ..ir.vision import PROCESSOR_CONFIG
from .artifact import Artifact, EmitContext


def processor_document(ir: ModelIR) -> dict:
    assert ir.architecture.vision is not None
    tower, pre = ir.architecture.vision.tower, ir.architecture.vision.preprocessing
    patch, merge, temporal = tower.patch_size, tower.spatial_merge_size, tower.temporal_patch_size

    def step(name: str, kind: str, attrs: dict | None = None) -> dict:
        operation: dict = {"name": name, "type": kind}
        if attrs is not None:
            operation["attrs"] = attrs
        return {"operation": operation}

    return {"processor": {"name": "qwen3_vl_image_processor", "transforms": [
        step("decode_image", "DecodeImage", {"color_space": "RGB"}),
        step("convert_to_rgb", "ConvertRGB"),
        step("resize", "Resize", {"smart_resize": 1, "min_pixels": pre.min_pixels, "max_pixels": pre.max_pixels,
                                  "patch_size": patch, "merge_size": merge}),
        step("rescale", "Rescale", {"rescale_factor": pre.rescale_factor}),
        step("normalize", "Normalize", {"mean": list(pre.image_mean), "std": list(pre.image_std), "qwen3_vl": 1}),
        step("patch_image", "PatchImage", {"patch_size": patch, "temporal_patch_size": temporal, "merge_size": merge}),
    ]}}


def emit_processor_config(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    if ir.vision is None:
        return []
    text = json.dumps(processor_document(ir), indent=2, sort_keys=True) + "\n"
    return [Artifact(PROCESSOR_CONFIG, text.encode("utf-8"))]
