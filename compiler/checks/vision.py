"""Contract checks of onnxruntime-genai's multimodal pipeline in a package (`model.vision`, `model.embedding`).

What must agree for onnxruntime-genai 0.18.0 to run images through the package
(`emit/genai_config.py`, `emit/processor_config.py`, `graphs/vision.py` say why each holds):

- `vision.config_filename` names a `processor_config.json` in the package, whose Resize and PatchImage
  patch and merge sizes equal `vision.patch_size` (which defaults to 14 when absent) and
  `vision.spatial_merge_size`, the sizes the vision graph was built for (its metadata) and the width of
  its `pixel_values`; its Normalize carries `qwen3_vl: 1` (without it the pixels are off by 2.0);
- the media token ids lie in the vocabulary, and the tokenizer holds `<|image_pad|>` and `<|vision_start|>`
  at those ids and a `<|vision_end|>` (the processor writes the tokens literally);
- every name the vision and embedding sections give exists in their graphs and every input of theirs is
  fed; the features pass between them in one dtype and at the decoder's width, and the embedding's
  output is the decoder's `inputs_embeds`;
- a vision graph that takes every image at once (its `image_grid_thw` has a symbolic first dimension)
  is not named to the runtime's per-image loop (`vision.inputs.image_grid_thw`), which would slice the
  processor's padded pixels at the wrong rows.

The text view (`text_overlay.json` over `genai_config.json`, what `og.MtpGenerator` loads) is checked
as any text config is, by `check_files`.
"""

from __future__ import annotations

import copy
import json

from ..ir.vision import MERGE_SIZE_KEY, PATCH_SIZE_KEY, TEMPORAL_PATCH_KEY, TEXT_OVERLAY
from ..schema.validation import json_pointer
from .graphs import Graph
from .package import TOKENIZER_JSON, Checker, folder

# onnxruntime-genai's defaults for keys a config leaves out (src/config.h).
_DEFAULT_PATCH_SIZE = 14
_DEFAULT_MERGE_SIZE = 2
_DEFAULT_GRID_NAME = "image_sizes"
_PROCESSOR_GRID_NAME = "image_grid_thw"  # the processor's own name for the grid tensor


def overlaid(base: dict, overlay: dict) -> dict:
    """`overlay` parsed over `base` as og.Config.overlay does: objects merge key by key, values replace."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = overlaid(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def check_vision(c: Checker, rel: str, cfg: dict, decoder_graph: Graph | None) -> None:
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    vision, embedding = model.get("vision"), model.get("embedding")
    if not isinstance(vision, dict) and not isinstance(embedding, dict):
        return
    base = folder(rel)
    decoder = model.get("decoder") if isinstance(model.get("decoder"), dict) else {}
    hidden = decoder.get("hidden_size")
    for key in ("vision", "embedding"):
        if not isinstance(model.get(key), dict):
            c.add(rel, json_pointer("model"), f"has model.{'embedding' if key == 'vision' else 'vision'} but no "
                                              f"model.{key}: onnxruntime-genai's multimodal pipeline runs both")
    if not isinstance(vision, dict) or not isinstance(embedding, dict):
        return
    vision_graph = c.graph(rel, json_pointer("model", "vision", "filename"), vision.get("filename"), base)
    embedding_graph = c.graph(rel, json_pointer("model", "embedding", "filename"), embedding.get("filename"), base)
    features = _check_vision_io(c, rel, vision, vision_graph, hidden)
    _check_embedding_io(c, rel, embedding, embedding_graph, decoder, decoder_graph, features)
    _check_sizes(c, rel, vision, vision_graph, base)
    _check_tokens(c, rel, model)


def _names(section: dict, key: str) -> dict:
    value = section.get(key)
    return value if isinstance(value, dict) else {}


def _check_vision_io(c: Checker, rel: str, vision: dict, graph: Graph | None, hidden) -> object:
    """The vision section's names against its graph; returns the features output (or None)."""
    if graph is None:
        return None
    inputs, outputs = _names(vision, "inputs"), _names(vision, "outputs")
    pixels = inputs.get("pixel_values", "pixel_values")
    fed = {pixels, _PROCESSOR_GRID_NAME}
    if pixels not in graph.inputs:
        c.add(rel, json_pointer("model", "vision", "inputs", "pixel_values"), f"{pixels!r} is not an input of {graph.relpath}")
    for name in sorted(set(graph.inputs) - fed):
        c.add(rel, json_pointer("model", "vision", "inputs"), f"{graph.relpath} input {name!r} is never fed: the runtime's "
                                                             f"processor gives only {pixels!r} and {_PROCESSOR_GRID_NAME!r}")
    grid_name = inputs.get("image_grid_thw", _DEFAULT_GRID_NAME)
    grid = graph.inputs.get(_PROCESSOR_GRID_NAME)
    if grid_name == _PROCESSOR_GRID_NAME and grid is not None and grid.shape and not isinstance(grid.shape[0], int):
        c.add(rel, json_pointer("model", "vision", "inputs", "image_grid_thw"),
              f"names {graph.relpath}'s grid input, which takes every image at once ({grid.shape[0]!r} images): the runtime "
              "then runs it once per image, slicing pixel_values at running sums of the patch counts, while its "
              "processor pads each image's patches to the largest image's count",
              hint="leave vision.inputs.image_grid_thw out: the runtime then runs the graph once on all images")
    name = outputs.get("image_features", "image_features")
    features = graph.outputs.get(name)
    if features is None:
        c.add(rel, json_pointer("model", "vision", "outputs", "image_features"), f"{name!r} is not an output of {graph.relpath}")
    elif isinstance(hidden, int) and isinstance(features.width, int) and features.width != hidden:
        c.add(rel, json_pointer("model", "vision", "outputs", "image_features"),
              f"{name!r} is {features.width} wide but model.decoder.hidden_size is {hidden}: the runtime sizes the "
              "features by the decoder's width")
    return features


def _check_embedding_io(c: Checker, rel: str, embedding: dict, graph: Graph | None, decoder: dict,
                        decoder_graph: Graph | None, features) -> None:
    if graph is None:
        return
    inputs, outputs = _names(embedding, "inputs"), _names(embedding, "outputs")
    ids = inputs.get("input_ids", "input_ids")
    image_features = inputs.get("image_features", "image_features")
    for role, name in (("input_ids", ids), ("image_features", image_features)):
        if name not in graph.inputs:
            c.add(rel, json_pointer("model", "embedding", "inputs", role), f"{name!r} is not an input of {graph.relpath}")
    for name in sorted(set(graph.inputs) - {ids, image_features}):
        c.add(rel, json_pointer("model", "embedding", "inputs"), f"{graph.relpath} input {name!r} is not named here, so the runtime never feeds it")
    taken = graph.inputs.get(image_features)
    if features is not None and taken is not None and features.dtype != taken.dtype:
        c.add(rel, json_pointer("model", "embedding", "inputs", "image_features"),
              f"{graph.relpath} takes {image_features!r} as {taken.dtype}, the vision graph gives {features.dtype}: "
              "the runtime hands the vision output over as it is")
    embeds_name = outputs.get("inputs_embeds", "inputs_embeds")
    embeds = graph.outputs.get(embeds_name)
    if embeds is None:
        c.add(rel, json_pointer("model", "embedding", "outputs", "inputs_embeds"), f"{embeds_name!r} is not an output of {graph.relpath}")
        return
    if decoder_graph is None:
        return
    wanted = _names(decoder, "inputs").get("inputs_embeds", "inputs_embeds")
    target = decoder_graph.inputs.get(wanted)
    if target is None:
        c.add(rel, json_pointer("model", "decoder", "inputs"), f"{decoder_graph.relpath} has no input {wanted!r}: the "
                                                               "multimodal pipeline's decoder takes the embedding graph's output")
    elif (target.dtype, target.width) != (embeds.dtype, embeds.width):
        c.add(rel, json_pointer("model", "embedding", "outputs", "inputs_embeds"),
              f"{embeds_name!r} is {embeds.dtype} x {embeds.width}, {decoder_graph.relpath}'s {wanted!r} takes "
              f"{target.dtype} x {target.width}")
    positions = decoder_graph.inputs.get(_names(decoder, "inputs").get("position_ids", "position_ids"))
    if positions is not None and positions.shape is not None and (len(positions.shape) != 3 or positions.shape[0] != 3):
        c.add(rel, json_pointer("model", "decoder", "filename"),
              f"{decoder_graph.relpath} takes position_ids of shape {list(positions.shape)}; the multimodal pipeline "
              "feeds 3-D MRoPE positions [3, batch, sequence]")


def _transforms(doc) -> dict[str, dict]:
    """The processor config's steps by type (their attrs)."""
    steps = {}
    transforms = ((doc or {}).get("processor") or {}).get("transforms") if isinstance(doc, dict) else None
    for item in transforms if isinstance(transforms, list) else []:
        op = item.get("operation") if isinstance(item, dict) else None
        if isinstance(op, dict) and isinstance(op.get("type"), str):
            steps[op["type"]] = op.get("attrs") if isinstance(op.get("attrs"), dict) else {}
    return steps


def _check_sizes(c: Checker, rel: str, vision: dict, graph: Graph | None, base: str) -> None:
    where = json_pointer("model", "vision", "config_filename")
    processor = c.resolve(rel, where, vision.get("config_filename"), base) if "config_filename" in vision else None
    if "config_filename" not in vision:
        c.add(rel, where, "is missing: onnxruntime-genai's Qwen image processor is configured by that file")
    steps = _transforms(c.parse(processor)) if processor is not None else {}
    if processor is not None:
        for kind in ("Resize", "Normalize", "PatchImage"):
            if kind not in steps:
                c.add(processor, json_pointer("processor", "transforms"), f"has no {kind} step")
        if "Normalize" in steps and steps["Normalize"].get("qwen3_vl") != 1:
            c.add(processor, json_pointer("processor", "transforms"), "Normalize lacks qwen3_vl: 1; without it onnxruntime-genai's "
                                                                      "pixels are off by 2.0 from transformers' for mean / std 0.5")
    patch = {"model.vision.patch_size": vision.get("patch_size", _DEFAULT_PATCH_SIZE)}
    merge = {"model.vision.spatial_merge_size": vision.get("spatial_merge_size", _DEFAULT_MERGE_SIZE)}
    for kind in ("Resize", "PatchImage"):
        if kind in steps:
            patch[f"{processor} {kind}.patch_size"] = steps[kind].get("patch_size")
            merge[f"{processor} {kind}.merge_size"] = steps[kind].get("merge_size")
    if graph is not None and graph.metadata:
        patch[f"{graph.relpath} (built for)"] = _int(graph.metadata.get(PATCH_SIZE_KEY))
        merge[f"{graph.relpath} (built for)"] = _int(graph.metadata.get(MERGE_SIZE_KEY))
    pixels = graph.inputs.get(_names(vision, "inputs").get("pixel_values", "pixel_values")) if graph is not None else None
    temporal = steps.get("PatchImage", {}).get("temporal_patch_size") or (
        _int(graph.metadata.get(TEMPORAL_PATCH_KEY)) if graph is not None else None)
    if pixels is not None and isinstance(pixels.width, int) and isinstance(temporal, int) and temporal > 0:
        side = (pixels.width // (3 * temporal)) ** 0.5
        if side == int(side) and 3 * temporal * int(side) ** 2 == pixels.width:
            patch[f"{graph.relpath} pixel_values width {pixels.width}"] = int(side)
    for what, sizes in (("patch size", patch), ("merge size", merge)):
        if len({v for v in sizes.values() if v is not None}) > 1:
            said = ", ".join(f"{k} {v}" for k, v in sizes.items())
            pointer = json_pointer("model", "vision", "patch_size" if what == "patch size" else "spatial_merge_size")
            c.add(rel, pointer, f"the {what} differs across the pipeline: {said}",
                  hint="the processor config, genai_config.json's vision section and the vision graph must agree")


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _check_tokens(c: Checker, rel: str, model: dict) -> None:
    vocab = model.get("vocab_size")
    ids = {key: model.get(key) for key in ("image_token_id", "video_token_id", "vision_start_token_id")}
    for key, value in ids.items():
        if value is None:
            if key != "video_token_id":
                c.add(rel, json_pointer("model"), f"has no {key}: the runtime finds the images in the prompt by it")
        elif isinstance(value, int) and isinstance(vocab, int) and not 0 <= value < vocab:
            c.add(rel, json_pointer("model", key), f"{value} is outside the vocabulary (vocab_size {vocab})")
    tokenizer = c.parse(TOKENIZER_JSON) if TOKENIZER_JSON in c.files and not c.files[TOKENIZER_JSON].deferred else None
    if not isinstance(tokenizer, dict):
        return
    added = {t.get("content"): t.get("id") for t in tokenizer.get("added_tokens") or [] if isinstance(t, dict)}
    vocab_map = ((tokenizer.get("model") or {}).get("vocab") or {}) if isinstance(tokenizer.get("model"), dict) else {}
    for token, key in (("<|image_pad|>", "image_token_id"), ("<|vision_start|>", "vision_start_token_id"),
                       ("<|vision_end|>", None)):
        found = added.get(token, vocab_map.get(token) if isinstance(vocab_map, dict) else None)
        if found is None:
            c.add(TOKENIZER_JSON, "", f"has no {token} token: onnxruntime-genai's processor writes it into the prompt")
        elif key is not None and isinstance(ids[key], int) and found != ids[key]:
            c.add(rel, json_pointer("model", key), f"is {ids[key]} but {TOKENIZER_JSON} encodes {token} as {found}")



def text_view(c: Checker, root: dict | None, profile) -> dict | None:
    """The root config with `text_overlay.json` parsed over it (what og.MtpGenerator's main model loads), or None
    when the package has no overlay; a multimodal config with a head but no overlay is a finding."""
    from .genai_config import check_runtime_keys

    if TEXT_OVERLAY not in c.files:
        model = (root or {}).get("model") if isinstance(root, dict) else None
        if isinstance(model, dict) and isinstance(model.get("vision"), dict) and isinstance(model.get("mtp"), dict):
            c.add(TEXT_OVERLAY, "", "is missing: og.MtpGenerator drafts only on a text model, which this overlay makes of "
                                    "the multimodal genai_config.json")
        return None
    overlay = c.parse(TEXT_OVERLAY)
    if not isinstance(overlay, dict) or not isinstance(root, dict):
        if overlay is not None and not isinstance(overlay, dict):
            c.add(TEXT_OVERLAY, "", "must be a JSON object (an og.Config.overlay document)")
        return None
    if profile is not None:
        check_runtime_keys(c, TEXT_OVERLAY, overlay, profile)
    return overlaid(root, overlay)


def text_view_document(root, cfg: dict) -> dict:
    """A package's genai_config.json as its text view reads it (`text_overlay.json` over it, where there is one):
    what `verify` and `tune` run, the text decoder the head drafts for."""
    from pathlib import Path

    overlay = Path(root) / TEXT_OVERLAY
    if not overlay.is_file():
        return cfg
    return overlaid(cfg, json.loads(overlay.read_text("utf-8")))
