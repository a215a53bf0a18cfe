"""The model card's lines for a package with a vision tower (`ModelIR.vision`): what the pipeline's files are,
and which onnxruntime-genai generator takes which input (`passes/vision.py` says why there are two views)."""

from __future__ import annotations

from ..ir import HeadContract, ModelIR
from ..ir.vision import PROCESSOR_CONFIG, TEXT_OVERLAY


def model_lines(ir: ModelIR) -> list[str]:
    vision = ir.architecture.vision
    if ir.vision is None or vision is None:
        return []
    pre = vision.preprocessing
    return [f"- vision tower: {vision.tower.summary()}; images resized to {pre.min_pixels:,}..{pre.max_pixels:,} pixels"]


def file_lines(ir: ModelIR) -> list[str]:
    v = ir.vision
    if v is None:
        return []
    return [
        f"- `{v.vision_filename}` (+ `.data`): the vision tower, every image of a prompt in one run",
        f"- `{v.embedding_filename}`: the token embeddings, the image features on the image tokens' rows",
        f"- `{v.decoder.filename}`: the main decoder on those embeddings (it reads `{ir.main.filename}`'s data: the "
        "weights are stored once)",
        f"- `{PROCESSOR_CONFIG}`: onnxruntime-genai's image processor",
        f"- `{TEXT_OVERLAY}`: turns `genai_config.json` into the text view (`og.Config.overlay`)",
    ]


def run_section(ir: ModelIR) -> list[str]:
    """Images with og.Generator on the pipeline; text with og.MtpGenerator on the text view."""
    target = ir.targets.onnxruntime_genai
    head = ir.head(HeadContract.ORT_GENAI)
    assert target is not None and ir.vision is not None
    lines = [
        "",
        "## Run with onnxruntime-genai",
        "",
        "`genai_config.json` is onnxruntime-genai's multimodal pipeline: images and text go through `og.Generator`.",
        "",
        "```python",
        "import onnxruntime_genai as og",
        "",
        'model = og.Model(".")',
        "processor = model.create_multimodal_processor()",
        'inputs = processor("<|vision_start|><|image_pad|><|vision_end|>" + question, images=og.Images.open(image_path))',
        "params = og.GeneratorParams(model)",
        "params.set_search_options(max_length=64, do_sample=False)",
        "generator = og.Generator(model, params)",
        "generator.set_inputs(inputs)",
        "while not generator.is_done():",
        "    generator.generate_next_token()",
        "print(generator.get_sequence(0))",
        "```",
    ]
    if head is None:
        return lines
    head_dir = head.filename.rsplit("/", 1)[0]
    return lines + [
        "",
        "The MTP head drafts on text: load the text view, which the overlay makes of the same files, and decode "
        "with `og.MtpGenerator` (onnxruntime-genai 0.18.0's MTP path takes token ids only, so it cannot draft "
        "after an image; the head's wiring is the same for both decoders).",
        "",
        "```python",
        "import onnxruntime_genai as og",
        "",
        'config = og.Config(".")',
        f'config.overlay(open("{TEXT_OVERLAY}").read())',
        "model = og.Model(config)",
        "params = og.GeneratorParams(model)",
        "params.set_search_options(max_length=64, do_sample=False)",
        f"params.set_speculative_options(max_draft_tokens={target.max_draft_tokens})",
        f'generator = og.MtpGenerator(model, og.Model("{head_dir}"), params)',
        "generator.append_tokens(prompt_token_ids)",
        "while not generator.is_done():",
        "    generator.generate_next_token()",
        "print(generator.get_sequence())",
        "```",
    ]
