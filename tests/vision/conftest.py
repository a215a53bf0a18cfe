"""Session fixtures of the vision-language tests, each built once on first use (`Lazy`).

The releases are `tests.fixtures.vision_checkpoints`' (transformers' own Qwen3.5 VLM, dense or MoE, with
its MTP head); the packages are compiled from them through the whole pipeline, as `tests/runtime` does:

- `mtp`: float32 with the head (onnxruntime-genai's CPU profile makes its logits float16 for MTP);
- `nohead`: float32 without the head, so its logits stay float32 (first-step logits within 1e-3);
- `fp16`: float16 without the head (the tower at float16);
- `text`: the same text model and head from a folder without the tower (disk bytes compared).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.lazy import Lazy
from tests.fixtures.vision_checkpoints import PREPROCESSOR, Release, write_png, write_release
from tests.runtime.conftest import compile_spec, write_spec

# (width, height): sides that are multiples of 32 (no resampling), and one resampled to 96 x 64; none whose
# side / 32 ends in .5, where onnxruntime-extensions and Python round differently (docs/runtimes.md).
IMAGE_SIZES = {"small": (64, 64), "wide": (96, 64), "large": (128, 96), "resized": (100, 70)}
VARIANTS = {"mtp": "", "nohead": "mtp: {head: off}\n", "fp16": "mtp: {head: off}\nprecision: {io_dtype: float16}\n",
            "text": ""}


@pytest.fixture(scope="session")
def vision_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vision")


@pytest.fixture(scope="session")
def images(vision_dir) -> dict[str, Path]:
    return {name: write_png(vision_dir / f"{name}.png", w, h, seed=i)
            for i, (name, (w, h)) in enumerate(IMAGE_SIZES.items())}


@pytest.fixture(scope="session")
def releases(vision_dir) -> Lazy:
    """(family, with_vision) -> Release; family "dense" or "moe"."""
    return Lazy(lambda key: write_release(vision_dir / f"hf-{key[0]}{'' if key[1] else '-text'}",
                                          moe=key[0] == "moe", with_vision=key[1]))


@pytest.fixture(scope="session")
def packages(vision_dir, releases) -> Lazy:
    """(family, variant) -> the compiled package folder."""

    def build(key):
        family, variant = key
        release: Release = releases[(family, variant != "text")]
        name = f"{family}-{variant}"
        spec = write_spec(vision_dir / f"{name}.yaml", name, f"{{hf: {release.folder.name}}}", VARIANTS[variant])
        return compile_spec(spec, vision_dir / f"pkg-{name}")

    return Lazy(build)


@pytest.fixture(scope="session")
def og_models(packages) -> Lazy:
    """(family, variant) -> og.Model of the package as it ships (the multimodal pipeline)."""
    import onnxruntime_genai as og

    return Lazy(lambda key: og.Model(str(packages[key])))


@pytest.fixture(scope="session")
def image_processor():
    """transformers' own Qwen2-VL image processor (its PIL backend) with the release's settings: the image half of
    Qwen3VLProcessor, which cannot be built here without torchvision (its video half imports it)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    settings = {k: v for k, v in PREPROCESSOR.items() if k not in ("image_processor_type", "processor_class")}
    return Qwen2VLImageProcessorPil(**settings)
