"""The vision tower three ways against transformers' `Qwen3_5VisionModel` (its merged features, `pooler_output`):
mtpc's numpy reference (written from transformers' modeling code, sharing nothing with the graphs), and the
package's vision.onnx on onnxruntime, float32 within 1e-4 and float16 within 1e-3, on og's processor output
itself (two images of different sizes arrive padded); the prompt's 3-D positions as transformers' get_rope_index
gives them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtpc.ir import SourceRef
from mtpc.reference.vision import VisionReference, rope_index
from mtpc.sources.hf import reader

from .prompts import og_prompt
from .test_pipeline import _transformers_view

NAMES = ("small", "large")


@pytest.fixture(scope="module")
def processed(og_models, images):
    """og's processor output for two images of different sizes, and the same rows unpadded."""
    _, got = og_prompt(og_models[("dense", "mtp")], [images[n] for n in NAMES], " it")
    return got, _transformers_view(got)


def _transformers_features(release, prompt) -> np.ndarray:
    with torch.no_grad():
        return release.model.model.visual(torch.from_numpy(prompt.pixel_values),
                                          grid_thw=torch.from_numpy(prompt.grid)).pooler_output.numpy()


def test_reference_equals_transformers(releases, processed):
    release = releases[("dense", True)]
    _, prompt = processed
    ref = SourceRef("hf", str(release.folder))
    info = reader.describe(ref)
    features = VisionReference(info.architecture.vision.tower, reader.open_weights(ref, info)).features(
        prompt.pixel_values, prompt.grid)
    np.testing.assert_allclose(features, _transformers_features(release, prompt), rtol=0, atol=1e-5)
    kind = torch.tensor([[1 if t == info.architecture.vision.tokens.image else 0 for t in prompt.ids]], dtype=torch.int32)
    want, _ = release.model.model.get_rope_index(torch.tensor([prompt.ids]), kind, image_grid_thw=torch.from_numpy(prompt.grid))
    got, _ = rope_index(prompt.ids, prompt.grid, info.architecture.vision.tokens, 2)
    np.testing.assert_array_equal(got, want[:, 0].numpy())


@pytest.mark.parametrize("variant", ["nohead", "fp16"])
@pytest.mark.parametrize("padded", [True, False])
def test_vision_graph_equals_transformers(packages, releases, processed, variant, padded):
    """float32 within 1e-4. float16 within 1e-3 of the features' largest magnitude (2.06 here): rounding the tower's
    matrices to float16 alone, everything else exact, moves these features by 1.26e-3 (6.1e-4 of that magnitude),
    and transformers' own float16 tower by 2.7e-3, so an absolute 1e-3 is not a property a float16 tower has."""
    import onnxruntime as ort

    got, prompt = processed
    pixels = got["pixel_values"] if padded else prompt.pixel_values
    assert (len(pixels) != len(prompt.pixel_values)) == padded  # og really pads these two
    session = ort.InferenceSession(str(packages[("dense", variant)] / "vision.onnx"))
    features = session.run(None, {"pixel_values": pixels, "image_grid_thw": prompt.grid})[0]
    want = _transformers_features(releases[("dense", True)], prompt)
    assert features.dtype == np.float32  # handed over in float32 whatever the tower computes in
    error = float(np.abs(features - want).max())
    assert error <= (1e-4 if variant == "nohead" else 1e-3 * float(np.abs(want).max())), error
