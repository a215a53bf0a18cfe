"""onnxruntime-genai's own image processor, configured by the package's processor_config.json, gives what
transformers' gives: the same pixels (within 1e-6), grids and expanded prompt ids, for one image and for two
images of different sizes (which og pads to the larger's patch count: the rows are compared image by image)."""

from __future__ import annotations

import numpy as np
import pytest

from .prompts import og_prompt, transformers_prompt

TEXT = " the in"


@pytest.mark.parametrize("names", [("small",), ("resized",), ("small", "large"), ("large", "wide", "small")])
def test_processor_equals_transformers(og_models, releases, image_processor, images, names):
    from transformers import AutoTokenizer

    paths = [images[n] for n in names]
    tokenizer = AutoTokenizer.from_pretrained(releases[("dense", True)].folder)
    _, got = og_prompt(og_models[("dense", "mtp")], paths, TEXT)
    want = transformers_prompt(tokenizer, image_processor, paths, TEXT)
    assert got["input_ids"][0].tolist() == want.ids
    np.testing.assert_array_equal(got["image_grid_thw"].reshape(-1, 3), want.grid)
    counts = want.grid.prod(axis=1)
    assert int(got["num_image_tokens"].sum()) == int(counts.sum()) // 4
    pixels = got["pixel_values"].reshape(-1, want.pixel_values.shape[1])
    padded = len(pixels) != counts.sum()
    if padded:  # each image's block padded to the largest's count with zero rows
        assert len(pixels) == len(counts) * counts.max()
    starts = np.arange(len(counts)) * counts.max() if padded else np.concatenate([[0], np.cumsum(counts)[:-1]])
    wanted = np.split(want.pixel_values, np.cumsum(counts)[:-1])
    for start, count, rows in zip(starts, counts, wanted):
        np.testing.assert_allclose(pixels[start : start + count], rows, rtol=0, atol=1e-6)
        if padded:
            assert not pixels[start + count : start + counts.max()].any()
    assert padded == (len(set(counts.tolist())) > 1)
