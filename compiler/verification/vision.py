"""`mtpc verify`'s check of a multimodal package's vision graph against the numpy reference of the tower.

Two images of different grids with seeded pixels, handed over as onnxruntime-genai's processor does
(each image's patches padded to the larger's count: `graphs/vision.py`) and unpadded: the merged features
of `vision.onnx` against `reference/vision.py`'s, from the same weights as built (quantized ones as stored).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def compare_vision(root: Path, ir, weights, report, tolerance, progress) -> None:
    import onnxruntime as ort

    from ..reference.vision import VisionReference
    from .runner import runtime_step

    if ir.vision is None or ir.architecture.vision is None or not (root / ir.vision.vision_filename).is_file():
        return
    tower = ir.architecture.vision.tower
    m = tower.spatial_merge_size
    grid = np.array([[1, 2 * m, 2 * m], [1, 3 * m, 2 * m]], np.int64)
    counts = grid.prod(axis=1)
    pixels = np.random.default_rng(0).uniform(-1, 1, (int(counts.sum()), tower.patch_width)).astype(np.float32)
    padded = np.zeros((len(counts) * int(counts.max()), tower.patch_width), np.float32)
    for i, (start, count) in enumerate(zip(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)):
        padded[i * counts.max() : i * counts.max() + count] = pixels[start : start + count]
    progress(f"running {ir.vision.vision_filename} on onnxruntime")
    want = VisionReference(tower, weights).features(pixels, grid)
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a refusal is reported once, by verify
    with runtime_step(f"onnxruntime could not load {ir.vision.vision_filename}"):
        run = ort.InferenceSession(str(root / ir.vision.vision_filename), options, providers=["CPUExecutionProvider"])
    for layout, rows in (("", pixels), (", padded as og's processor hands two images", padded)):
        got = run.run(None, {"pixel_values": rows, "image_grid_thw": grid})[0]
        report.compare(f"vision features{layout}", got, want, tolerance)
