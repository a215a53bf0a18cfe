"""A Qwen3.5 vision-language config.json and preprocessor_config.json into the IR's `VisionModel`, and refused
where they cannot be run (each error names the file and field)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtpc.sources.hf.config import Config
from mtpc.sources.hf.vision import canonical_shape, vision_model
from mtpc.util.diagnostics import SourceError

VISION = {"depth": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 48, "out_hidden_size": 64,
          "num_position_embeddings": 36, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
          "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0}}
PREPROCESSOR = {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2, "image_mean": [0.5] * 3,
                "image_std": [0.5] * 3, "size": {"shortest_edge": 1024, "longest_edge": 65536}}


def _read(tmp_path: Path, *, vision=None, top=None, preprocessor=PREPROCESSOR):
    doc = {"text_config": {"hidden_size": 64}, "vision_config": {**VISION, **(vision or {})},
           "image_token_id": 265, "video_token_id": 266, "vision_start_token_id": 263, "vision_end_token_id": 264,
           **(top or {})}
    if preprocessor is not None:
        (tmp_path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    return vision_model(Config(tmp_path / "config.json", doc), tmp_path)


def test_the_tower_its_tokens_and_the_image_settings(tmp_path):
    model, why = _read(tmp_path)
    assert why is None
    assert model.tower.patch_width == 1536 and model.tower.grid_side == 6 and model.tower.head_dim == 16
    assert (model.tokens.image, model.tokens.vision_start, model.tokens.vision_end) == (265, 263, 264)
    assert (model.preprocessing.min_pixels, model.preprocessing.max_pixels) == (1024, 65536)
    assert canonical_shape("visual.patch_embed.proj.weight", (32, 3, 2, 16, 16)) == (32, 1536)


def test_without_a_preprocessor_config_the_tower_is_left_out_and_why(tmp_path):
    model, why = _read(tmp_path, preprocessor=None)
    assert model is None and "no preprocessor_config.json" in why


def test_a_deepstack_tower_is_not_qwen35s(tmp_path):
    model, why = _read(tmp_path, vision={"deepstack_visual_indexes": [1]})
    assert model is None and "deepstack" in why


@pytest.mark.parametrize("kw, message", [
    (dict(vision={"out_hidden_size": 48}), "field vision_config.out_hidden_size (48) must be the text model's hidden_size (64)"),
    (dict(vision={"num_position_embeddings": 35}), "field vision_config.num_position_embeddings (35) must be a square"),
    (dict(vision={"num_heads": 3}), "field vision_config.num_heads (3) must divide hidden_size (32)"),
    (dict(vision={"hidden_act": "relu"}), "field vision_config.hidden_act is 'relu'"),
    (dict(top={"image_token_id": None}), "field image_token_id must be a non-negative integer"),
    (dict(preprocessor={**PREPROCESSOR, "patch_size": 14}), "preprocessor_config.json: field patch_size is 14, config.json's vision tower has 16"),
    (dict(preprocessor={**PREPROCESSOR, "size": {"shortest_edge": 9, "longest_edge": 4}}), "field size.shortest_edge (9) exceeds size.longest_edge (4)"),
    (dict(preprocessor={**PREPROCESSOR, "do_normalize": False}), "field do_normalize is false"),
    (dict(preprocessor={**PREPROCESSOR, "image_std": [0.5, 0, 0.5]}), "field image_std must not hold a zero"),
])
def test_what_cannot_run_is_refused_naming_the_file_and_field(tmp_path, kw, message):
    with pytest.raises(SourceError) as caught:
        _read(tmp_path, **kw)
    assert message in str(caught.value)
