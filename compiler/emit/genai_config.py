"""`genai_config.json` for onnxruntime-genai, plus the MTP head's own folder config.

The main config describes the main decoder and, when there is a head, its
`model.mtp` section (what the runtime projects into the head's decoder) and the
speculative settings. The head also gets `mtp/genai_config.json` whose decoder
*is* the head: og.MtpGenerator takes the head as a model of its own folder and
reads the head's hidden-state input name from that config.

A package with a vision tower (`ModelIR.vision`) is onnxruntime-genai's multimodal pipeline
(`qwen3_5` / `qwen3_5_moe`: vision, embedding, a decoder taking inputs_embeds) with the same `mtp`
section, and `text_overlay.json` turns it into the text view `og.MtpGenerator` drafts on:
`og.Config(dir).overlay(<its text>)` gives back the text model type and `model.onnx` (the overlay is
parsed over the file, key by key: src/config.cpp, `ParseConfig`; the vision and embedding sections
stay, unread by a decoder-only model).

Every key comes from the target version's profile (`mtpc.profiles`): the
runtime's parser rejects unknown keys, so a document the profile would not
accept is a bug here, not a user error.
"""

from __future__ import annotations

import json
import posixpath

from ..ir import AttentionMode, DecoderConfig, HeadContract, ModelIR, OrtGenaiTarget
from ..ir.vision import PROCESSOR_CONFIG, TEXT_OVERLAY
from ..profiles import ort_genai_profile
from ..profiles.ort_genai import OrtGenaiProfile
from .artifact import Artifact, DataLayout, EmitContext

CONFIG_NAME = "genai_config.json"


def emit_genai_config(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    target = ir.targets.onnxruntime_genai
    if target is None:
        return []
    profile = ort_genai_profile(target.version)
    head = ir.head(HeadContract.ORT_GENAI)
    shared = (_shared_initializers(ir.main, head, ctx.data_layouts, ctx.shared_data_files, profile, target)
              if head is not None else [])

    main_doc = _document(ir, target, profile, _decoder_section(ir.main, shared, config_dir=""))
    if head is not None:
        main_doc["model"]["mtp"] = _mtp_section(ir.main, head, shared, profile)
        main_doc["speculative"] = {"max_draft_tokens": target.max_draft_tokens}
    artifacts = []
    if ir.vision is not None:
        # The package's config is the multimodal pipeline; the text view is its overlay (module doc).
        # The overlay merges key by key, so what the text view must not have is blanked (an empty name: none): the
        # pipeline decoder's inputs_embeds, and the embedding session, which 0.18.0 otherwise takes for a decoder-only
        # model's "CPU embedding" and refuses outside its Engine (measured: "Decoder-only CPU embedding requires the
        # dynamic-batching Engine").
        inputs = {"input_ids": ir.main.input_name("input_ids"), "inputs_embeds": ""}
        text_view = {"type": main_doc["model"]["type"], "decoder": {"filename": ir.main.filename, "inputs": inputs},
                     "embedding": {"filename": ""}}
        artifacts.append(_artifact(TEXT_OVERLAY, {"model": text_view}, profile, schema=None))
        main_doc["model"].update(_multimodal_sections(ir, profile, _decoder_section(ir.vision.decoder, shared,
                                                                                    config_dir="")))
    artifacts.insert(0, _artifact(CONFIG_NAME, main_doc, profile))

    if head is not None:
        head_dir = posixpath.dirname(head.filename)
        if not head_dir:
            raise AssertionError(f"the head needs a folder of its own, not {head.filename!r}")
        head_decoder = _decoder_section(head, shared, config_dir=head_dir)
        head_decoder["filename"] = posixpath.basename(head.filename)
        head_doc = _document(ir, target, profile, head_decoder)
        artifacts.append(_artifact(posixpath.join(head_dir, CONFIG_NAME), head_doc, profile))
    return artifacts


def reads_data_layouts(ir: ModelIR) -> bool:
    """Whether the configs depend on where the graph emitter lays the weights out: the
    `shared_initializers` entries (offsets into a data file) a profile that shares them gets."""
    target = ir.targets.onnxruntime_genai
    return (target is not None and ir.head(HeadContract.ORT_GENAI) is not None
            and ort_genai_profile(target.version).shares_initializers(target.execution_provider))


def _artifact(relpath: str, doc: dict, profile: OrtGenaiProfile, schema: str | None = "genai_config") -> Artifact:
    problems = profile.unaccepted(doc)
    if problems:
        raise AssertionError(f"{relpath} has keys onnxruntime-genai {profile.version} rejects: {problems}")
    return Artifact(relpath, dumps(doc), schema=schema)


def _multimodal_sections(ir: ModelIR, profile: OrtGenaiProfile, decoder: dict) -> dict:
    """What makes the config onnxruntime-genai's multimodal pipeline: its model type, media token ids, the
    vision and embedding sessions, and the decoder taking inputs_embeds.

    `vision.inputs` names no `image_grid_thw`: the runtime would then run the vision graph once per image
    at offsets that ignore how its own processor pads images of different sizes (`graphs/vision.py`), while
    without it the graph runs once on every image (`QwenVisionState::Run`, src/models/multi_modal.cpp).
    `vision.patch_size` is written although the processor config decides the patching: it defaults to 14."""
    assert ir.vision is not None and ir.architecture.vision is not None
    v, tower, tokens = ir.vision, ir.architecture.vision.tower, ir.architecture.vision.tokens
    (pixels, _grid), (features,) = v.vision.inputs, v.vision.outputs
    (ids, image_features), (embeds,) = v.embedding.inputs, v.embedding.outputs
    return {
        "type": profile.vision_model_types[ir.architecture.family],
        "image_token_id": tokens.image,
        "video_token_id": tokens.video,
        "vision_start_token_id": tokens.vision_start,
        "decoder": decoder,
        "embedding": {
            "filename": v.embedding_filename,
            "session_options": _session_options(ir.main),
            "inputs": {"input_ids": ids.name, "image_features": image_features.name},
            "outputs": {"inputs_embeds": embeds.name},
        },
        "vision": {
            "filename": v.vision_filename,
            "config_filename": PROCESSOR_CONFIG,
            "session_options": _session_options(ir.main),
            "spatial_merge_size": tower.spatial_merge_size,
            "patch_size": tower.patch_size,
            "inputs": {"pixel_values": pixels.name},
            "outputs": {"image_features": features.name},
        },
    }


def dumps(doc: dict) -> bytes:
    # The 0.18.0 parser rejects \uXXXX escapes, so non-ASCII text stays raw UTF-8.
    text = json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False, indent=2)
    return (text + "\n").encode("utf-8")


def _document(ir: ModelIR, target: OrtGenaiTarget, profile: OrtGenaiProfile, decoder: dict) -> dict:
    arch = ir.architecture
    tokens = arch.tokens
    model = {
        "type": profile.model_types[arch.family],
        "vocab_size": arch.vocab_size,
        "context_length": arch.context_length,
        "bos_token_id": tokens.bos,
        "eos_token_id": tokens.eos[0] if len(tokens.eos) == 1 else list(tokens.eos),
        "pad_token_id": tokens.pad,
        "decoder": decoder,
    }
    doc = {
        "model": model,
        "search": {
            "max_length": arch.context_length,
            "do_sample": False,
            "past_present_share_buffer": profile.past_present_share_buffer(target.attention, target.kv_cache),
        },
    }
    if target.attention is AttentionMode.PAGED:
        doc["engine"] = {"dynamic_batching": _dynamic_batching(target, profile, has_head=ir.mtp.emit_head)}
    return doc


def _dynamic_batching(target: OrtGenaiTarget, profile: OrtGenaiProfile, *, has_head: bool) -> dict:
    batching: dict = {"block_size": target.block_size, "max_batch_size": target.max_batch_size}
    if target.num_blocks is not None:
        batching["num_blocks"] = target.num_blocks
    else:
        batching["gpu_utilization_factor"] = (
            target.gpu_utilization_factor
            if target.gpu_utilization_factor is not None
            else profile.default_gpu_utilization_factor
        )
    if has_head and profile.accepts("engine.dynamic_batching", "prefix_caching"):
        batching["prefix_caching"] = profile.prefix_caching_with_mtp
    return batching


def _session_options(cfg: DecoderConfig) -> dict:
    options: dict = dict(cfg.session_options)
    # The CPU provider is implicit; any other is named with no extra options.
    options["provider_options"] = [] if cfg.execution_provider == "cpu" else [{cfg.execution_provider: {}}]
    return options


def _decoder_section(cfg: DecoderConfig, shared: list[dict], *, config_dir: str) -> dict:
    section: dict = {
        "filename": cfg.filename,
        "session_options": _session_options(cfg),
        "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "num_hidden_layers": cfg.num_hidden_layers,
        "head_size": cfg.head_size,
        "inputs": dict(cfg.inputs),
        "outputs": dict(cfg.outputs),
    }
    if cfg.state_groups:
        section["state_groups"] = [_state_group(g) for g in cfg.state_groups]
    if cfg.state_update_capacity:
        section["state_update_capacity"] = cfg.state_update_capacity
    if cfg.sliding_window is not None:
        section["sliding_window"] = {
            "window_size": cfg.sliding_window.window_size,
            "layers": list(cfg.sliding_window.layers),
        }
    if shared:
        section["shared_initializers"] = _relative_to(shared, config_dir)
    return section


def _state_group(group) -> dict:
    entry: dict = {"kind": group.kind, "layer_ids": list(group.layer_ids)}
    if group.state_update_capacity:
        # The runtime wants it on every fixed group or none, with the key-head count on the recurrent one.
        entry["state_update"] = {"capacity": group.state_update_capacity}
        if group.key_head_count:
            entry["state_update"]["key_head_count"] = group.key_head_count
    return entry


def _mtp_section(main: DecoderConfig, head: DecoderConfig, shared: list[dict], profile: OrtGenaiProfile) -> dict:
    # The runtime's projection takes the paged input names from model.decoder.inputs;
    # the head section itself names only the roles the profile lists for it.
    section: dict = {
        "filename": head.filename,
        "num_hidden_layers": head.num_hidden_layers,
        "num_key_value_heads": head.num_key_value_heads,
        "head_size": head.head_size,
        "main_hidden_states": main.output_name("hidden_states"),
        "inputs": {role: name for role, name in head.inputs if profile.accepts("model.mtp.inputs", role)},
        "outputs": {role: name for role, name in head.outputs if profile.accepts("model.mtp.outputs", role)},
    }
    if profile.accepts("model.mtp", "enabled"):
        section["enabled"] = True
    if shared:
        section["shared_initializers"] = shared
    return section


def _shared_initializers(
    main: DecoderConfig,
    head: DecoderConfig,
    layouts: dict[str, DataLayout],
    shared_data_files: dict[str, str],
    profile: OrtGenaiProfile,
    target: OrtGenaiTarget,
) -> list[dict]:
    """Entries pointing both sessions at one copy of the weights they share, from the graph emitter's layouts.

    When the main graph reads its embedding and LM head from the head's data file (one
    copy on disk), every shareable tensor there is shared. Otherwise a weight is shared
    when the head holds all its parts (a quantized weight is data plus scales) under the
    same names with the same dtype, shape and byte length; both graphs write them from the
    same weight and scheme. A head whose copy is quantized differently keeps it, even where
    one part happens to match.
    """
    if not profile.shares_initializers(target.execution_provider):
        return []
    head_file = f"{head.filename}.data"
    data_file = shared_data_files.get(main.filename, f"{main.filename}.data")
    main_layout = layouts.get(data_file) or {}
    head_layout = layouts.get(head_file) or {}

    def storage(layout: DataLayout, weight: str) -> dict:
        return {
            name: (t.length, t.data_type, tuple(t.shape)) for name, t in layout.items() if _weight_of(name) == weight
        }

    shared_weights = {w for w in map(_weight_of, main_layout) if storage(main_layout, w) == storage(head_layout, w)}
    entries = [
        {
            "name": name,
            "data_file": data_file,
            "offset": str(t.offset),
            "length": str(t.length),
            "data_type": t.data_type,
            "shape": list(t.shape),
        }
        for name, t in main_layout.items()
        if _weight_of(name) in shared_weights
    ]
    return sorted(entries, key=lambda e: (int(e["offset"]), e["name"]))


def _weight_of(initializer: str) -> str:
    """The weight an initializer belongs to, under either naming `contracts.quantized_names` uses:
    `model.embed_tokens.weight_Q4` -> `model.embed_tokens.weight`, `lm_head.MatMul.scales` -> `lm_head.MatMul.weight`."""
    base, sep, _ = initializer.partition(".weight")
    if sep:
        return base + sep
    for companion in (".scales", ".zero_points"):
        if initializer.endswith(companion):
            return initializer.removesuffix(companion) + ".weight"
    return initializer


def _relative_to(shared: list[dict], config_dir: str) -> list[dict]:
    if not config_dir:
        return shared
    return [dict(entry, data_file=posixpath.relpath(entry["data_file"], config_dir)) for entry in shared]
