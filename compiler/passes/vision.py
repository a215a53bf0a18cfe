"""Give a vision-language source onnxruntime-genai's multimodal pipeline beside its text decoder.

A Qwen3.5 release is a vision-language model: its vision tower turns images into features the text
model reads in place of the image tokens' embeddings. onnxruntime-genai 0.18.0 runs that as a
`MultiModalLanguageModel` (model type `qwen3_5` / `qwen3_5_moe`: src/models/model.cpp, `ModelType::IsVLM`)
of three sessions: vision (`pixel_values`, `image_grid_thw` -> `image_features`), embedding (`input_ids`,
`image_features` -> `inputs_embeds`, zero feature rows on decode steps) and a decoder taking
`inputs_embeds` and 3-D MRoPE `position_ids [3, B, S]` that the runtime computes
(position_inputs.cpp, `Qwen2VLPositionInputs`).

The MTP head cannot draft in that pipeline in 0.18.0: `og.MtpGenerator` takes token ids only
(src/mtp_generator.h, `AppendTokens(cpu_span<const int32_t>)`), and `MultiModalPipelineState`
(src/models/multi_modal.h) forwards no `RewindTo` / `SnapshotState` to its decoder state, so a rejected
draft cannot be taken back. So the package keeps both: the text decoder (`model.onnx`, windowed, with
the head) for `og.MtpGenerator` on text, and this pipeline for images, its decoder
(`embeds_decoder.onnx`) the same layers over the same data file, unwindowed, with the same outputs, the
head's hidden states among them: when the runtime's MTP path takes images, the head's wiring is already
the one it would need. genai_config.json describes the pipeline; `text_overlay.json` is the
`og.Config.overlay` that turns it into the text view (`emit/genai_config.py`).

The tower is left out, with a note, where the pipeline cannot run it: no onnxruntime-genai target, a
release whose multimodal pipeline was not measured (0.17.1), or paged attention (the Engine runs text).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import AttentionMode, ModelIR
from ..ir.vision import VisionPipeline
from ..ir.vision_contracts import embedding_contract, embeds_decoder, vision_contract
from ..profiles import ort_genai_profile
from .pipeline import PassResult


def left_out(ir: ModelIR) -> str | None:
    """Why the source's vision tower is not built into the package (None: it is, or there is none)."""
    if ir.architecture.vision is None:
        return None
    target = ir.targets.onnxruntime_genai
    if target is None:
        return "only onnxruntime-genai's multimodal pipeline runs it, and the spec has no onnxruntime_genai target"
    if ir.architecture.family not in ort_genai_profile(target.version).vision_model_types:
        return f"onnxruntime-genai {target.version}'s multimodal pipeline was not measured with it"
    if target.attention is AttentionMode.PAGED:
        return "onnxruntime-genai's paged engine runs text only"
    return None


def builds_tower(ir: ModelIR) -> bool:
    return ir.architecture.vision is not None and left_out(ir) is None


class VisionPipelineLowering:
    name = "vision"

    def __call__(self, ir: ModelIR) -> PassResult:
        vision = ir.architecture.vision
        if vision is None:
            return PassResult(ir, False)
        reason = left_out(ir)
        if reason is not None:
            note = f"the checkpoint's vision tower is left out (a text-only package): {reason}"
            if note in ir.notes:
                return PassResult(ir, False)
            return PassResult(replace(ir, notes=(*ir.notes, note)), True, (note,))
        io, hidden = ir.precision.io_dtype, ir.architecture.hidden_size
        pipeline = VisionPipeline(vision_contract(vision.tower), embedding_contract(hidden, io),
                                  embeds_decoder(ir.main, hidden, io))
        if pipeline == ir.vision:
            return PassResult(ir, False)
        changes = (
            f"vision: {pipeline.vision_filename} ({vision.tower.summary()}), every image of a prompt in one run",
            f"vision: {pipeline.embedding_filename} puts the image features on the image tokens' embeddings",
            f"vision: {pipeline.decoder.filename}, the text model on inputs_embeds over {ir.main.filename}'s weights "
            f"(unwindowed), for onnxruntime-genai's multimodal pipeline; {ir.main.filename} stays the text view "
            "the head drafts for",
        )
        return PassResult(replace(ir, vision=pipeline), True, changes)
