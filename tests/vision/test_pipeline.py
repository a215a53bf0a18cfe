"""The package as it ships, run by onnxruntime-genai's multimodal pipeline (vision -> embedding -> the decoder on
inputs_embeds with the runtime's 3-D MRoPE positions), decodes images and text as transformers'
Qwen3_5(Moe)ForConditionalGeneration: 16 greedy tokens for one image and for two images of different sizes, in
either order (og pads the smaller's patches), and for text alone, and the first step's logits within 1e-3 in
float32.

The fixture reacts to the positions' height and width rows (tests/fixtures/vision_checkpoints.py): the same
decoder graph fed positions flattened to the time row leaves transformers' tokens, so a decoder or a runtime
that read one row would fail here.
"""

from __future__ import annotations

import numpy as np
import pytest

from mtpc.ir.vision import VisionTokens
from mtpc.reference.vision import rope_index
from tests.fixtures.vision_checkpoints import IMAGE_TOKEN, VIDEO_TOKEN, VISION_END, VISION_START

from .prompts import Prompt, og_greedy, og_prompt, transformers_greedy, transformers_logits

STEPS = 16
# Prompts whose 16 greedy tokens reach no end-of-text token on either release.
CASES = {"one image": (("small",), " the in"), "two images": (("small", "large"), " it"),
         "two images, larger first": (("large", "wide"), " the"), "no image": ((), " the in")}


def _prompt(named) -> Prompt:
    return Prompt(named["input_ids"][0].tolist(), named["pixel_values"], named["image_grid_thw"].reshape(-1, 3))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("family", ["dense", "moe"])
def test_greedy_with_images_equals_transformers(og_models, releases, images, family, case):
    names, text = CASES[case]
    model = og_models[(family, "mtp")]
    named, got = og_prompt(model, [images[n] for n in names], text)
    tokens, _ = og_greedy(model, named, STEPS)
    want = transformers_greedy(releases[(family, True)].model, _transformers_view(got), STEPS)
    assert len(tokens) == STEPS and tokens == want


def _transformers_view(got: dict) -> Prompt:
    """og's processed prompt as transformers takes it: the images' rows without og's padding (the processor
    test holds them equal to transformers' own)."""
    if "pixel_values" not in got:  # text only, through the same pipeline
        return Prompt(got["input_ids"][0].tolist(), None, None)
    grid = got["image_grid_thw"].reshape(-1, 3)
    counts = grid.prod(axis=1)
    pixels = got["pixel_values"].reshape(-1, got["pixel_values"].shape[-1])
    if len(pixels) != counts.sum():
        pixels = np.concatenate([pixels[i * counts.max() : i * counts.max() + c] for i, c in enumerate(counts)])
    return Prompt(got["input_ids"][0].tolist(), pixels, grid)


@pytest.mark.parametrize("family", ["dense", "moe"])
def test_first_step_logits_within_1e_3(og_models, releases, images, family):
    model = og_models[(family, "nohead")]  # float32 logits: a head makes onnxruntime-genai's CPU logits float16
    named, got = og_prompt(model, [images["small"], images["large"]], " it")
    _, first = og_greedy(model, named, 1)
    want = transformers_logits(releases[(family, True)].model, _transformers_view(got))
    assert first.shape == want.shape
    np.testing.assert_allclose(first, want, rtol=0, atol=1e-3)


def test_positions_flattened_to_the_time_row_leave_transformers_tokens(packages, releases, images, og_models):
    """The package's decoder run by hand on onnxruntime with the prompt's MRoPE positions gives transformers'
    tokens; the same run with the H and W rows replaced by the T row does not."""
    names, text = CASES["two images"]
    _, got = og_prompt(og_models[("dense", "mtp")], [images[n] for n in names], text)
    prompt = _transformers_view(got)
    want = transformers_greedy(releases[("dense", True)].model, prompt, STEPS)
    run = _OrtPipeline(packages[("dense", "mtp")])
    assert run.greedy(got, STEPS, flatten=False) == want
    assert run.greedy(got, STEPS, flatten=True) != want


class _OrtPipeline:
    """vision -> embedding -> decoder on onnxruntime, greedy, positions from transformers' get_rope_index as
    mtpc's reference writes it (the runtime's own are held equal to transformers' by the tests above)."""

    def __init__(self, package):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.vision, self.embedding, self.decoder = (
            ort.InferenceSession(str(package / name), options)
            for name in ("vision.onnx", "embedding.onnx", "embeds_decoder.onnx"))

    def greedy(self, got: dict, steps: int, *, flatten: bool) -> list[int]:
        ids = got["input_ids"][0].astype(np.int64).tolist()
        grid = got["image_grid_thw"].reshape(-1, 3)
        features = self.vision.run(None, {"pixel_values": got["pixel_values"], "image_grid_thw": grid})[0]
        positions, delta = rope_index(ids, grid, VisionTokens(IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END), 2)
        if flatten:
            positions = np.broadcast_to(positions[0], positions.shape)
        state = {i.name: np.zeros([1 if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape],
                                  np.float32) for i in self.decoder.get_inputs() if i.name.startswith("past")}
        embeds = self.embedding.run(None, {"input_ids": np.array([ids]), "image_features": features})[0]
        positions, length, tokens = positions[:, None, :].astype(np.int64), len(ids), []
        while len(tokens) < steps:
            feed = dict(state, inputs_embeds=embeds, attention_mask=np.ones((1, length), np.int64), position_ids=positions)
            out = dict(zip([o.name for o in self.decoder.get_outputs()], self.decoder.run(None, feed)))
            tokens.append(int(out["logits"][0, -1].argmax()))
            state = {name: out[name.replace("past_key_values.", "present.").replace("past.", "present.")] for name in state}
            embeds = self.embedding.run(None, {"input_ids": np.array([[tokens[-1]]]),
                                               "image_features": np.zeros((0, features.shape[1]), features.dtype)})[0]
            positions = np.full((3, 1, 1), length + delta, np.int64)
            length += 1
        return tokens
