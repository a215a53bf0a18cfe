"""Hugging Face checkpoints: `config.json` + safetensors (single file or sharded), Qwen3.5 here and the
families in `FAMILIES` (`glm4moe.py`, `qwen3next.py`, `deepseek2.py`: each its config keys and tensor names).

`describe` reads only JSON and safetensors headers. `open_weights` maps HF names
to canonical ones (`mtpc.weights`) and converts conventions on read: offset-RMSNorm
weights get `+1` in float32 (every norm except the GatedDeltaNet gated norm), and
`A_log` becomes `decay_scale = -exp(A_log)`. Other tensors are handed out as
memory-mapped views of the files, so opening a large checkpoint costs nothing (the store: `store.py`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ...util.diagnostics import SourceError
from ...util.lazy_import import lazy_module
from ...ir import Architecture, SourceRef, SourceTensor
from ...weights import canonical_shapes
from ..info import SourceInfo
from . import deepseek2, glm4moe, qwen3next, step35
from .config import SUPPORTED_ARCHITECTURES, Config, architecture, read_json
from .experts import Entry, ExpertTensor, group_experts, parts_of
from .checkpoint import Checkpoint
from .files import checkpoint_of, needed_files, tokenizer_files, weight_files
from .store import HFWeightStore
from ..mtp_head import head_verdict
from ..card_facts import hf_card_facts
from .safetensors import FLOAT8_E4M3, SafetensorsFile
from .vision import PATCH_EMBED, canonical_shape, is_vision_tensor, vision_model

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # read when a weight is: describing the checkpoint needs none

TEXT_PREFIXES = ("model.language_model.", "model.")
_OFFSET_NORM_SUFFIXES = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "pre_fc_norm_embedding.weight",
    "pre_fc_norm_hidden.weight",
)
_OFFSET_NORM_NAMES = ("norm.weight", "mtp.norm.weight")
_A_LOG = "linear_attn.A_log"
_DECAY_SCALE = "linear_attn.decay_scale"


# ----------------------------------------------------------------------------- names and conventions


def canonical_name(hf_name: str) -> str | None:
    """The canonical name of an HF tensor (the vision tower's `visual.*`), or None for one mtpc has no use for."""
    if hf_name.startswith("mtp.") or hf_name == "lm_head.weight":
        name = hf_name
    else:
        for prefix in TEXT_PREFIXES:
            if hf_name.startswith(prefix):
                name = hf_name[len(prefix) :]
                break
        else:
            return None
        if name.startswith("vision_tower."):
            return None
    if name.endswith(_A_LOG):
        return name[: -len(_A_LOG)] + _DECAY_SCALE
    return name


def is_offset_norm(canonical: str) -> bool:
    return canonical in _OFFSET_NORM_NAMES or canonical.endswith(_OFFSET_NORM_SUFFIXES)


def needs_conversion(canonical: str) -> bool:
    return is_offset_norm(canonical) or canonical.endswith(_DECAY_SCALE) or canonical == PATCH_EMBED


def to_canonical_value(canonical: str, raw: np.ndarray) -> np.ndarray:
    """Convert an HF value to the canonical convention (float32 where converted)."""
    if canonical == PATCH_EMBED:  # the Conv3d kernel as the linear over a flattened patch
        return np.asarray(raw, dtype=np.float32).reshape(raw.shape[0], -1)
    if is_offset_norm(canonical):
        return np.asarray(raw, dtype=np.float32) + np.float32(1.0)
    if canonical.endswith(_DECAY_SCALE):
        return -np.exp(np.asarray(raw, dtype=np.float32))
    return raw


class _QwenNames:
    """Qwen3.5's names and conventions (this module's functions), as `glm4moe.GlmNames` gives GLM-4.5's."""

    canonical_name = staticmethod(lambda hf_name: canonical_name(hf_name))
    to_canonical_value = staticmethod(lambda canonical, raw: to_canonical_value(canonical, raw))
    needs_conversion = staticmethod(lambda canonical: needs_conversion(canonical))
    source_name = staticmethod(lambda canonical: canonical)  # a head tensor's canonical name is its HF name
    canonical_shape = staticmethod(lambda canonical, shape: canonical_shape(canonical, shape))
    optional_head: tuple[str, ...] = ()
    assembled = staticmethod(lambda entries: entries)  # nothing stored fused


# Families read by a module of their own, each giving its `ARCHITECTURES` (config.json's `architectures`),
# `FAMILY` (the IR's), `architecture(cfg, directory)`, `names(arch, qwen_names)` (its tensor names and
# conventions) and `declared_heads(cfg, hf_names)` (where its head's depth is declared, and the depth).
# Qwen3.5 is this module's own (`config.architecture`, `_QwenNames`).
FAMILIES = (glm4moe, qwen3next, deepseek2, step35)


def _family_of(family: str):
    return next((m for m in FAMILIES if m.FAMILY == family), None)


def _family(cfg: Config):
    """The module that reads this config (None: Qwen3.5), refusing an architecture no module reads."""
    archs = cfg.doc.get("architectures")
    supported = SUPPORTED_ARCHITECTURES + tuple(a for m in FAMILIES for a in m.ARCHITECTURES)
    if not isinstance(archs, list) or not archs:
        raise cfg.fail("architectures", "is missing (expected one of " + ", ".join(supported) + ")")
    if not any(a in supported for a in archs):
        raise cfg.fail("architectures", f"{archs!r} is not supported (expected one of {', '.join(supported)})")
    return next((m for m in FAMILIES if any(a in m.ARCHITECTURES for a in archs)), None)


def _names(arch: Architecture):
    """How the family's HF tensors map to canonical ones (names, value conventions, optional head tensors)."""
    family = _family_of(arch.family)
    return _QwenNames() if family is None else family.names(arch, _QwenNames())


def _declared_heads(cfg: Config, arch: Architecture, hf_names) -> tuple[str, int]:
    family = _family_of(arch.family)
    if family is not None:
        return family.declared_heads(cfg, hf_names)
    field, _ = cfg.lookup("mtp_num_hidden_layers")
    return f"config.json field {field}", cfg.int("mtp_num_hidden_layers", 0)


# The last canonical entries made: (the listing they were made of, its architecture, the entries). A listing
# stands for its checkpoint's state (`weight_files` keeps one object per state), and describe, `inspect`'s
# findings and the weight store all read the same one: a 92k-tensor checkpoint's names are mapped once.
_last_entries: tuple[dict, Architecture, dict] | None = None


def _canonical_entries(files: dict[str, list[str]], arch: Architecture, where: Path) -> dict[str, Entry | ExpertTensor]:
    """canonical name -> (file name, HF name), or the HF tensors of stacked experts (`experts`);
    head tensors kept (as `mtp.*`), the vision tower's (`visual.*`) where the IR has the tower."""
    global _last_entries
    last = _last_entries
    if last is not None and last[0] is files and last[1] == arch:
        return last[2]
    entries = _mapped_entries(files, arch, where)
    _last_entries = (files, arch, entries)
    return entries


def _mapped_entries(files: dict[str, list[str]], arch: Architecture, where: Path) -> dict[str, Entry | ExpertTensor]:
    tied, names = arch.tie_word_embeddings, _names(arch)
    entries: dict[str, Entry] = {}
    for filename in sorted(files):
        for hf_name in files[filename]:
            name = names.canonical_name(hf_name)
            if name is None or (tied and name == "lm_head.weight") or (arch.vision is None and is_vision_tensor(name)):
                continue
            entries[name] = (filename, hf_name)
    return names.assembled(group_experts(entries, str(where), names.source_name))


# The last description made: (the reference, the folder's state, the description). `diff SPEC SPEC`
# lowers two specs of one checkpoint, and a description is a function of the folder's files.
_last_description: tuple[SourceRef, tuple, SourceInfo] | None = None


def describe(ref: SourceRef) -> SourceInfo:
    """config.json and the safetensors headers; no tensor data is read, the tokenizer files only named."""
    global _last_description
    checkpoint = checkpoint_of(ref)
    state = checkpoint.state()
    last = _last_description
    if last is not None and last[0] == ref and last[1] == state:
        return last[2]
    info = _describe(checkpoint)
    _last_description = (ref, state, info)
    return info


def _config(checkpoint: Checkpoint) -> Config:
    config_path = checkpoint.folder / "config.json"
    if not checkpoint.has("config.json"):
        raise SourceError(f"{checkpoint.label}: no config.json")
    return Config(config_path, read_json(config_path))


def _weight_files(checkpoint: Checkpoint, arch: Architecture):
    """`files.weight_files`, leaving out a shard of tensors the family does not read (a vision tower) when it
    is not on this machine."""
    return weight_files(checkpoint, _unread(arch), arch.family)


def _unread(arch: Architecture):
    """Whether the model reads an HF tensor: not when it has no canonical name, nor a vision tower's tensor when the
    IR has no tower."""
    names = _names(arch)

    def unread(name: str) -> bool:
        canonical = names.canonical_name(name)
        return canonical is None or (arch.vision is None and is_vision_tensor(canonical))

    return unread


def files_to_fetch(ref: SourceRef, info: SourceInfo) -> list[str]:
    """What compile reads of the checkpoint: its small files, its tokenizer's, and the shards that hold a tensor
    the model reads (with their index)."""
    from .checkpoint import METADATA_FILES

    checkpoint = checkpoint_of(ref)
    shards = needed_files(checkpoint, _unread(info.architecture))
    return [*(n for n in METADATA_FILES if checkpoint.has(n)), *info.tokenizer_names, *sorted(shards)]


def _describe(checkpoint: Checkpoint) -> SourceInfo:
    directory = checkpoint.folder
    cfg = _config(checkpoint)
    family = _family(cfg)
    arch = (family.architecture if family else architecture)(cfg, directory)
    vision_note = None
    if family is None:  # Qwen3.5's vision-language releases carry the tower
        vision, vision_note = vision_model(cfg, directory)
        arch = replace(arch, vision=vision)
    listed, files = _weight_files(checkpoint, arch)
    arch = replace(arch, mtp_num_layers=_declared_heads(cfg, arch, [n for ns in listed.values() for n in ns])[1])
    entries = _canonical_entries(listed, arch, directory)
    facts: list[tuple[str, object]] = [
        ("architectures", ", ".join(cfg.doc["architectures"])),
        ("format", "safetensors"),
        ("safetensors_files", len(files)),
        ("text_tensors", sum(1 for n in entries if not n.startswith("mtp.") and not is_vision_tensor(n))),
        ("mtp_tensors", sum(1 for n in entries if n.startswith("mtp."))),
    ]
    if arch.vision is not None:
        facts.append(("vision_tensors", sum(1 for n in entries if is_vision_tensor(n))))
    if vision_note is not None:
        facts.append(("vision_note", vision_note))
    arch = _with_head_verdict(cfg, arch, entries)
    if arch.unusable_head is not None:
        facts.append(("mtp_note", arch.unusable_head.reason))
    storage = _storage(files, entries)
    store = HFWeightStore(files, entries, arch.tie_word_embeddings, _names(arch))
    return SourceInfo(
        architecture=arch,
        storage=tuple(sorted((g, "+".join(sorted(d))) for g, d in storage.items())),
        tokenizer=tokenizer_files(checkpoint),
        facts=tuple(facts),
        tensors=tuple(SourceTensor(n, tuple(i.shape), i.dtype) for n in store.names() for i in [store.info(n)]),
        card=hf_card_facts(directory, cfg.doc),
    )


# What a weight may be stored as: floats only (an integer tensor is not a weight mtpc can use as one).
# F8_E4M3 too: every such tensor reaching here is paired with its block scales (`fp8.py`), read as float32.
WEIGHT_DTYPES = ("F32", "F16", "BF16")


_FLOAT_CODES = frozenset((*WEIGHT_DTYPES, FLOAT8_E4M3))


def _storage(files: dict[str, SafetensorsFile], entries: dict[str, Entry | ExpertTensor]) -> dict[str, set[str]]:
    """Each tensor group's stored dtypes (`inspect`'s storage), every weight of the text model and head checked
    to be stored as a float type (the first that is not is named)."""
    storage: dict[str, set[str]] = {}
    refused = []
    headers = {f: st.entries for f, st in files.items()}
    for name, value in entries.items():
        codes = storage.setdefault(_group(name), set())
        for filename, hf_name in parts_of(value):
            code = headers[filename][hf_name]["dtype"]
            codes.add(code)
            if code not in _FLOAT_CODES:
                refused.append((filename, hf_name, code))
    if refused:
        filename, hf_name, code = min(refused)
        raise SourceError(f"{files[filename].path}: tensor {hf_name!r} has dtype {code}; a weight must be "
                          f"{', '.join(WEIGHT_DTYPES[:-1])} or {WEIGHT_DTYPES[-1]}")
    return storage


def shape_problems(directory: Path | str, arch: Architecture, shape_of: Callable[[str], tuple[int, ...] | None],
                   source_name: Callable[[str], str]) -> list[str]:
    """Where the tensors contradict config.json (missing, or another shape), from the headers alone.
    `shape_of(name)`: a canonical tensor's shape, None when the checkpoint has none."""
    problems = []
    for name, shape in canonical_shapes(arch).items():
        found = shape_of(name)
        if found is None:
            where = "embed_tokens.weight (tied)" if name == "lm_head.weight" and arch.tie_word_embeddings else name
            problems.append(f"{directory}: checkpoint has no tensor for {where} (needed by config.json)")
        elif tuple(found) != shape:
            # as the checkpoint names it (a GLM head tensor: its trailing layer's)
            problems.append(f"{directory}: tensor {source_name(name)} has shape {list(found)}, config.json implies "
                            f"{list(shape)}")
    return problems


def check(ref: SourceRef, info: SourceInfo) -> list[str]:
    """`open_weights`'s checks of the tensors against config.json, as findings (for `mtpc inspect`), from the
    description's tensors: no data is read, and nothing is read twice."""
    shapes = {t.name: t.shape for t in info.tensors}
    return shape_problems(checkpoint_of(ref).label, info.architecture, shapes.get, _names(info.architecture).source_name)


def _with_head_verdict(cfg: Config, arch: Architecture, entries: dict[str, Entry | ExpertTensor]) -> Architecture:
    """`arch` with the MTP blocks that can be built, judged from the head's tensors present (`mtp_head`)."""
    declared_key, _ = _declared_heads(cfg, arch, entries)
    names = _names(arch)
    one_block = {n for n in canonical_shapes(replace(arch, mtp_num_layers=1)) if n.startswith("mtp.")}
    known = one_block | set(names.optional_head)
    present = {n for n in entries if n.startswith("mtp.")}
    usable, unusable = head_verdict(
        declared=arch.mtp_num_layers,
        declared_key=declared_key,
        expected=map(names.source_name, one_block),
        present=map(names.source_name, present & known),
        unknown=map(names.source_name, present - known),
    )
    return replace(arch, mtp_num_layers=usable, unusable_head=unusable)


def _group(canonical: str) -> str:
    parts = canonical.split(".")
    if parts[0] == "layers":
        return ".".join(parts[2:])
    if parts[:2] == ["visual", "blocks"]:
        return "visual." + ".".join(parts[3:])
    if parts[:2] == ["mtp", "layers"]:
        return "mtp." + ".".join(parts[3:])
    return canonical


def open_weights(ref: SourceRef, info: SourceInfo) -> "HFWeightStore":
    checkpoint = checkpoint_of(ref)
    arch = info.architecture
    listed, files = _weight_files(checkpoint, arch)
    entries = _canonical_entries(listed, arch, checkpoint.folder)
    _storage(files, entries)  # a weight of no float type is refused
    store = HFWeightStore(files, entries, arch.tie_word_embeddings, _names(arch))
    problems = shape_problems(checkpoint.label, arch, lambda name: store.info(name).shape if name in store else None,
                              store.source_name)
    if problems:
        raise SourceError(problems[0])
    return store
