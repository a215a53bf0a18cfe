"""Image + text prompts as onnxruntime-genai's processor and transformers' each make them, and greedy decoding
through each: og's multimodal pipeline (og.Generator on the package as it ships) and transformers'
`Qwen3_5(Moe)ForConditionalGeneration.generate`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.fixtures.vision_checkpoints import IMAGE_TOKEN

IMAGE_BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"


def prompt_text(images: int, text: str) -> str:
    return "Look" + IMAGE_BLOCK * images + text


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    pixel_values: np.ndarray | None  # [patches, 1536]
    grid: np.ndarray | None  # [images, 3]


def og_prompt(model, paths: list[Path], text: str):
    """og's processor on the prompt: (its NamedTensors, as numpy)."""
    import onnxruntime_genai as og

    processor = model.create_multimodal_processor()
    images = og.Images.open(*map(str, paths)) if paths else None
    named = processor(prompt_text(len(paths), text), images=images)
    return named, {k: named[k].as_numpy() for k in named.keys()}


def transformers_prompt(tokenizer, image_processor, paths: list[Path], text: str) -> Prompt:
    """transformers' image processor and tokenizer on the prompt, each `<|image_pad|>` expanded to the image's
    merged patch count as transformers' Qwen3VLProcessor does (`replace_image_token`: grid.prod() // merge**2)."""
    from PIL import Image

    if not paths:
        return Prompt(tokenizer(prompt_text(0, text)).input_ids, None, None)
    pixels = image_processor([Image.open(p) for p in paths])
    grid = np.asarray(pixels["image_grid_thw"])
    merge = image_processor.merge_size
    expanded = prompt_text(len(paths), text)
    for g in grid:  # one image at a time, in order, as the processor replaces them
        expanded = expanded.replace("<|image_pad|>", "<|placeholder|>" * int(g.prod() // merge**2), 1)
    expanded = expanded.replace("<|placeholder|>", "<|image_pad|>")
    return Prompt(tokenizer(expanded).input_ids, np.asarray(pixels["pixel_values"]), grid)


def og_greedy(model, named, steps: int) -> tuple[list[int], np.ndarray]:
    """og.Generator's greedy tokens on the processed prompt, and the logits of its first step `[1, S, V]`."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=named["input_ids"].shape()[1] + steps)
    generator = og.Generator(model, params)
    generator.set_inputs(named)
    tokens, first = [], None
    while not generator.is_done():
        generator.generate_next_token()
        if first is None:
            first = np.asarray(generator.get_output("logits"), np.float32)
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens, first


def transformers_logits(model, prompt: Prompt) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(use_cache=False, **_inputs(prompt)).logits.numpy()


def transformers_greedy(model, prompt: Prompt, steps: int) -> list[int]:
    import torch

    inputs = _inputs(prompt)
    with torch.no_grad():
        out = model.generate(**inputs, attention_mask=torch.ones_like(inputs["input_ids"]), max_new_tokens=steps,
                             do_sample=False)
    return out[0, len(prompt.ids):].tolist()


def _inputs(prompt: Prompt) -> dict:
    import torch

    ids = torch.tensor([prompt.ids])
    kind = torch.tensor([[1 if t == IMAGE_TOKEN else 0 for t in prompt.ids]], dtype=torch.int32)
    inputs = {"input_ids": ids, "mm_token_type_ids": kind}
    if prompt.pixel_values is not None:
        inputs.update(pixel_values=torch.from_numpy(prompt.pixel_values), image_grid_thw=torch.from_numpy(prompt.grid))
    return inputs
