"""A Qwen3.5 vision-language checkpoint's tower: `config.json`'s `vision_config` and media token ids, and the
image processor's settings from `preprocessor_config.json`, into the IR's `VisionModel`.

The tower's tensors are `model.visual.*`; their canonical names drop `model.` (`visual.blocks.0.attn.qkv.weight`).
The Conv3d patch embedding `[hidden, C, T, P, P]` is canonically the linear `[hidden, C*T*P*P]` over a
flattened patch (the processor flattens each patch in that order), so it is stored and quantized like any
projection.
"""

from __future__ import annotations

from pathlib import Path

from ...ir.vision import ImagePreprocessing, VisionModel, VisionTokens, VisionTower
from .config import Config, read_json

VISION_PREFIX = "visual."
PATCH_EMBED = "visual.patch_embed.proj.weight"
PREPROCESSOR_CONFIG = "preprocessor_config.json"
# transformers' Qwen3_5VisionConfig defaults, for keys a config leaves out.
_TOWER_DEFAULTS = {"patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3,
                   "hidden_act": "gelu_pytorch_tanh"}
_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu")


def is_vision_tensor(canonical: str) -> bool:
    return canonical.startswith(VISION_PREFIX)


def canonical_shape(canonical: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The canonical shape of a tensor stored as `shape` (the patch embedding flattened to a linear)."""
    if canonical == PATCH_EMBED and len(shape) > 2:
        width = 1
        for d in shape[1:]:
            width *= d
        return (shape[0], width)
    return shape


def vision_model(cfg: Config, directory: Path) -> tuple[VisionModel | None, str | None]:
    """The tower config.json describes, or (None, why not) when it has none or it cannot be run."""
    vision = cfg.doc.get("vision_config")
    if vision is None:
        return None, None
    if not isinstance(vision, dict):
        raise cfg.fail("vision_config", "must be an object")
    sub = Config(cfg.path, {"text_config": vision})  # typed reads of the nested object, errors naming its fields
    sub.text_prefix = "vision_config."

    def value(key: str):
        return vision.get(key, _TOWER_DEFAULTS.get(key))

    if vision.get("deepstack_visual_indexes"):
        return None, ("config.json field vision_config.deepstack_visual_indexes: a tower with deepstack features "
                      "(Qwen3-VL) is not Qwen3.5's; onnxruntime-genai's qwen3_5 pipeline refuses deepstack")
    act = value("hidden_act")
    if act not in _ACTIVATIONS:
        raise cfg.fail("vision_config.hidden_act", f"is {act!r}; expected one of {', '.join(_ACTIVATIONS)}")
    rope = vision.get("rope_parameters") or {}
    theta = rope.get("rope_theta", vision.get("rope_theta", 10000.0)) if isinstance(rope, dict) else 10000.0
    tower = VisionTower(
        depth=sub.int("depth"),
        hidden_size=sub.int("hidden_size"),
        num_heads=sub.int("num_heads"),
        intermediate_size=sub.int("intermediate_size"),
        out_hidden_size=sub.int("out_hidden_size"),
        num_position_embeddings=sub.int("num_position_embeddings"),
        patch_size=sub.int("patch_size", _TOWER_DEFAULTS["patch_size"]),
        temporal_patch_size=sub.int("temporal_patch_size", _TOWER_DEFAULTS["temporal_patch_size"]),
        spatial_merge_size=sub.int("spatial_merge_size", _TOWER_DEFAULTS["spatial_merge_size"]),
        in_channels=sub.int("in_channels", _TOWER_DEFAULTS["in_channels"]),
        rope_theta=cfg.float("vision_config.rope_parameters.rope_theta", theta),
        hidden_act=act,
    )
    if tower.num_heads == 0 or tower.hidden_size % tower.num_heads or tower.head_dim % 4:
        raise cfg.fail("vision_config.num_heads", f"({tower.num_heads}) must divide hidden_size ({tower.hidden_size}) "
                       "into heads whose width is a multiple of 4 (2-D rotary)")
    hidden = cfg.int("hidden_size")
    if tower.out_hidden_size != hidden:
        raise cfg.fail("vision_config.out_hidden_size", f"({tower.out_hidden_size}) must be the text model's hidden_size "
                       f"({hidden}): the merged features take the image tokens' embedding rows")
    if tower.grid_side**2 != tower.num_position_embeddings:
        raise cfg.fail("vision_config.num_position_embeddings",
                       f"({tower.num_position_embeddings}) must be a square (the learned position grid)")
    tokens = VisionTokens(image=_top_int(cfg, "image_token_id"), video=_top_int(cfg, "video_token_id"),
                          vision_start=_top_int(cfg, "vision_start_token_id"),
                          vision_end=_top_int(cfg, "vision_end_token_id"))
    path = directory / PREPROCESSOR_CONFIG
    if not path.is_file():
        return None, (f"{directory}: no {PREPROCESSOR_CONFIG}: the image processor's settings are not known, so the "
                      "vision tower is left out")
    return VisionModel(tower, tokens, _preprocessing(path, read_json(path), tower)), None


def _top_int(cfg: Config, key: str) -> int:
    value = cfg.doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise cfg.fail(key, f"must be a non-negative integer (a vision-language config names its media tokens), not {value!r}")
    return value


def _preprocessing(path: Path, doc: dict, tower: VisionTower) -> ImagePreprocessing:
    """transformers' Qwen2VLImageProcessor settings; the processor's patch and merge sizes must be the tower's."""
    from ...util.diagnostics import SourceError

    def fail(key: str, problem: str) -> SourceError:
        return SourceError(f"{path}: field {key} {problem}")

    for key, expected in (("patch_size", tower.patch_size), ("merge_size", tower.spatial_merge_size),
                          ("temporal_patch_size", tower.temporal_patch_size)):
        if key in doc and doc[key] != expected:
            raise fail(key, f"is {doc[key]!r}, config.json's vision tower has {expected}")
    size = doc.get("size") or {}
    min_pixels = doc.get("min_pixels", size.get("shortest_edge") if isinstance(size, dict) else None)
    max_pixels = doc.get("max_pixels", size.get("longest_edge") if isinstance(size, dict) else None)
    for key, v in (("size.shortest_edge", min_pixels), ("size.longest_edge", max_pixels)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise fail(key, f"must be a positive integer (the image's pixel bounds), not {v!r}")
    if min_pixels > max_pixels:
        raise fail("size.shortest_edge", f"({min_pixels}) exceeds size.longest_edge ({max_pixels})")

    def triple(key: str, default: float) -> tuple[float, float, float]:
        v = doc.get(key, [default] * 3)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = [v] * 3
        if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                             for x in v)):
            raise fail(key, f"must be three numbers (one per RGB channel), not {v!r}")
        return (float(v[0]), float(v[1]), float(v[2]))

    for flag in ("do_resize", "do_rescale", "do_normalize", "do_convert_rgb"):
        if doc.get(flag) is False:
            raise fail(flag, "is false; onnxruntime-genai's Qwen image processor always does it")
    rescale = doc.get("rescale_factor", 1 / 255)
    if isinstance(rescale, bool) or not isinstance(rescale, (int, float)) or rescale <= 0:
        raise fail("rescale_factor", f"must be a positive number, not {rescale!r}")
    std = triple("image_std", 0.5)
    if any(s == 0 for s in std):
        raise fail("image_std", "must not hold a zero")
    return ImagePreprocessing(min_pixels=min_pixels, max_pixels=max_pixels, image_mean=triple("image_mean", 0.5),
                              image_std=std, rescale_factor=float(rescale))
