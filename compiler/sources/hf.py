"""Hugging Face Qwen3.5 checkpoints: `config.json` + safetensors (single file or sharded).

`describe` reads only JSON and safetensors headers. `open_weights` maps HF names
to canonical ones (`mtpc.weights`) and converts conventions on read: offset-RMSNorm
weights get `+1` in float32 (every norm except the GatedDeltaNet gated norm), and
`A_log` becomes `decay_scale = -exp(A_log)`. Other tensors are handed out as
memory-mapped views of the files, so opening a large checkpoint costs nothing.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Iterable

import numpy as np

from ..diagnostics import SourceError
from ..ir import Architecture, LayerKind, LinearAttentionDims, Rope, SourceRef, TokenIds
from ..weights import TensorInfo, Weight, canonical_shapes
from . import SourceInfo
from .layer_layout import Declared, layer_kinds
from .safetensors_io import SafetensorsFile

TEXT_PREFIXES = ("model.language_model.", "model.")
SUPPORTED_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
TOKENIZER_FILES = (
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "merges.txt",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
)
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
    """The canonical name of an HF tensor, or None for tensors outside the text model (vision tower)."""
    if hf_name.startswith("mtp.") or hf_name == "lm_head.weight":
        name = hf_name
    else:
        for prefix in TEXT_PREFIXES:
            if hf_name.startswith(prefix):
                name = hf_name[len(prefix) :]
                break
        else:
            return None
        if name.startswith(("visual.", "vision_tower.")):
            return None
    if name.endswith(_A_LOG):
        return name[: -len(_A_LOG)] + _DECAY_SCALE
    return name


def is_offset_norm(canonical: str) -> bool:
    return canonical in _OFFSET_NORM_NAMES or canonical.endswith(_OFFSET_NORM_SUFFIXES)


def needs_conversion(canonical: str) -> bool:
    return is_offset_norm(canonical) or canonical.endswith(_DECAY_SCALE)


def to_canonical_value(canonical: str, raw: np.ndarray) -> np.ndarray:
    """Convert an HF value to the canonical convention (float32 where converted)."""
    if is_offset_norm(canonical):
        return np.asarray(raw, dtype=np.float32) + np.float32(1.0)
    if canonical.endswith(_DECAY_SCALE):
        return -np.exp(np.asarray(raw, dtype=np.float32))
    return raw


# ----------------------------------------------------------------------------- config.json


class _Config:
    """Typed reads from `config.json`, with errors naming the file and field."""

    def __init__(self, path: Path, doc: dict):
        self.path = path
        self.doc = doc
        nested = doc.get("text_config")
        if nested is not None and not isinstance(nested, dict):
            raise SourceError(f"{path}: field text_config must be an object")
        self.text = nested if nested is not None else doc
        self.text_prefix = "text_config." if nested is not None else ""

    def fail(self, field: str, problem: str) -> SourceError:
        return SourceError(f"{self.path}: field {field} {problem}")

    def lookup(self, name: str) -> tuple[str, object]:
        """(dotted field name, value or None): the text config first, then the top level."""
        if name in self.text:
            return self.text_prefix + name, self.text[name]
        return name, self.doc.get(name)

    def int(self, name: str, default: int | None = None) -> int:
        field, value = self.lookup(name)
        if value is None:
            if default is None:
                raise self.fail(self.text_prefix + name, "is missing (required)")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(field, f"must be a non-negative integer, not {value!r}")
        return value

    def float(self, field: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"must be a number, not {value!r}")
        return float(value)


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SourceError(f"{path}: cannot read: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SourceError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SourceError(f"{path}: expected a JSON object")
    return doc


def _layer_kinds(cfg: _Config, num_layers: int) -> tuple[LayerKind, ...]:
    """`layer_types` first, `full_attention_interval` second (`layer_layout` owns the rule)."""
    per_layer = interval = None
    field, types = cfg.lookup("layer_types")
    if types is not None:
        known = {k.value: k for k in (LayerKind.FULL_ATTENTION, LayerKind.LINEAR_ATTENTION)}
        if not isinstance(types, list) or len(types) != num_layers:
            raise cfg.fail(field, f"must list one type per layer ({num_layers})")
        for t in types:
            if t not in known:
                raise cfg.fail(field, f"has unsupported layer type {t!r} (expected full_attention or linear_attention)")
        per_layer = Declared(f"field {field}", tuple(known[t] for t in types))
    field, value = cfg.lookup("full_attention_interval")
    if value is not None:
        interval = Declared(f"field {field}", value)
    return layer_kinds(str(cfg.path), num_layers, per_layer=per_layer, interval=interval)


def _rope(cfg: _Config, head_dim: int) -> Rope:
    _, params = cfg.lookup("rope_parameters")
    if params is None:
        _, params = cfg.lookup("rope_scaling")
    params = params or {}
    if not isinstance(params, dict):
        raise cfg.fail(cfg.text_prefix + "rope_parameters", "must be an object")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ("default", "mrope"):
        raise cfg.fail(
            cfg.text_prefix + "rope_parameters.rope_type", f"{rope_type!r} is not supported (only default RoPE)"
        )
    if "rope_theta" in params:
        theta = cfg.float(cfg.text_prefix + "rope_parameters.rope_theta", params["rope_theta"])
    else:
        field, value = cfg.lookup("rope_theta")
        if value is None:
            raise cfg.fail(cfg.text_prefix + "rope_parameters.rope_theta", "is missing (required; or rope_theta)")
        theta = cfg.float(field, value)
    if "partial_rotary_factor" in params:
        factor = cfg.float(cfg.text_prefix + "rope_parameters.partial_rotary_factor", params["partial_rotary_factor"])
    else:
        field, value = cfg.lookup("partial_rotary_factor")
        factor = 0.25 if value is None else cfg.float(field, value)
    section = params.get("mrope_section") or ()
    if not isinstance(section, (list, tuple)) or not all(isinstance(x, int) for x in section):
        raise cfg.fail(cfg.text_prefix + "rope_parameters.mrope_section", "must be a list of integers")
    rope = Rope(theta, factor, head_dim, tuple(section), bool(params.get("mrope_interleaved", True)))
    if not 0 < rope.rotary_dim <= head_dim or rope.rotary_dim % 2:
        raise cfg.fail(
            cfg.text_prefix + "partial_rotary_factor", f"gives rotary dim {rope.rotary_dim} for head_dim {head_dim}"
        )
    if section and sum(section) != rope.rotary_dim // 2:
        raise cfg.fail(
            cfg.text_prefix + "rope_parameters.mrope_section",
            f"sums to {sum(section)}, not rotary_dim / 2 = {rope.rotary_dim // 2}",
        )
    return rope


def _token_ids(cfg: _Config, directory: Path) -> TokenIds:
    """bos / eos / pad from generation_config.json, else config.json, else its text_config."""
    sources: list[tuple[Path, dict]] = []
    generation = directory / "generation_config.json"
    if generation.is_file():
        sources.append((generation, _read_json(generation)))
    sources.append((cfg.path, cfg.doc))
    if cfg.text is not cfg.doc:
        sources.append((cfg.path, cfg.text))

    def first(key: str) -> tuple[Path, object]:
        for path, doc in sources:
            if doc.get(key) is not None:
                return path, doc[key]
        return cfg.path, None

    where, eos = first("eos_token_id")
    if eos is None:
        raise SourceError(f"{cfg.path}: field eos_token_id is missing (required; also looked in {generation.name})")
    eos_ids = tuple(eos) if isinstance(eos, list) else (eos,)
    if not eos_ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in eos_ids):
        raise SourceError(f"{where}: field eos_token_id must be an integer or a list of integers")
    # Qwen checkpoints often name no bos / pad token; the end-of-text token stands in, as in their tokenizers.
    _, bos = first("bos_token_id")
    _, pad = first("pad_token_id")
    return TokenIds(
        bos=bos if isinstance(bos, int) else eos_ids[0],
        eos=eos_ids,
        pad=pad if isinstance(pad, int) else eos_ids[0],
    )


def _architecture(cfg: _Config, directory: Path) -> Architecture:
    archs = cfg.doc.get("architectures")
    if not isinstance(archs, list) or not archs:
        raise cfg.fail("architectures", "is missing (expected one of " + ", ".join(SUPPORTED_ARCHITECTURES) + ")")
    if not any(a in SUPPORTED_ARCHITECTURES for a in archs):
        raise cfg.fail(
            "architectures", f"{archs!r} is not supported (expected one of {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    field, gate = cfg.lookup("attn_output_gate")
    if gate is False:
        raise cfg.fail(field, "is false; only gated attention (Qwen3.5) is supported")
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    if heads == 0:
        raise cfg.fail(cfg.text_prefix + "num_attention_heads", "must be positive")
    kv_heads = cfg.int("num_key_value_heads")
    if kv_heads == 0 or heads % kv_heads:
        raise cfg.fail(
            cfg.text_prefix + "num_key_value_heads", f"({kv_heads}) must divide num_attention_heads ({heads})"
        )
    head_dim = cfg.int("head_dim", hidden // heads)
    num_layers = cfg.int("num_hidden_layers")
    kinds = _layer_kinds(cfg, num_layers)
    linear = None
    if LayerKind.LINEAR_ATTENTION in kinds:
        linear = LinearAttentionDims(
            num_key_heads=cfg.int("linear_num_key_heads"),
            key_head_dim=cfg.int("linear_key_head_dim"),
            num_value_heads=cfg.int("linear_num_value_heads"),
            value_head_dim=cfg.int("linear_value_head_dim"),
            conv_kernel=cfg.int("linear_conv_kernel_dim", 4),
        )
        if linear.num_key_heads == 0 or linear.num_value_heads % linear.num_key_heads:
            raise cfg.fail(
                cfg.text_prefix + "linear_num_value_heads",
                f"({linear.num_value_heads}) must be a multiple of linear_num_key_heads ({linear.num_key_heads})",
            )
    field, eps = cfg.lookup("rms_norm_eps")
    # The top-level flag is the one transformers ties by; a nested one only counts when it is alone.
    if "tie_word_embeddings" in cfg.doc:
        field_tie, tie = "tie_word_embeddings", cfg.doc["tie_word_embeddings"]
    else:
        field_tie, tie = cfg.lookup("tie_word_embeddings")
    if tie is not None and not isinstance(tie, bool):
        raise cfg.fail(field_tie, f"must be true or false, not {tie!r}")
    return Architecture(
        family="qwen35",
        hidden_size=hidden,
        intermediate_size=cfg.int("intermediate_size"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=cfg.int("vocab_size"),
        layer_kinds=kinds,
        rms_norm_eps=1e-6 if eps is None else cfg.float(field, eps),
        rope=_rope(cfg, head_dim),
        context_length=cfg.int("max_position_embeddings"),
        tokens=_token_ids(cfg, directory),
        linear_attention=linear,
        tie_word_embeddings=bool(tie),
        mtp_num_layers=cfg.int("mtp_num_hidden_layers", 0),
    )


# ----------------------------------------------------------------------------- files


def _directory(ref: SourceRef) -> Path:
    if not ref.path:
        raise SourceError("hf source needs a path (a checkpoint directory with config.json)")
    path = Path(ref.path)
    if path.is_file() and path.name == "config.json":
        path = path.parent
    if not path.is_dir():
        raise SourceError(f"{path}: not a checkpoint directory")
    return path


def _weight_files(directory: Path) -> dict[str, list[str]]:
    """file name -> HF tensor names it holds, from the index or the single file's header."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise SourceError(f"{index}: field weight_map is missing or empty")
        files: dict[str, list[str]] = {}
        for name, filename in sorted(weight_map.items()):
            if not isinstance(filename, str) or "/" in filename or "\\" in filename:
                raise SourceError(f"{index}: weight_map entry {name!r} names no file in this directory")
            files.setdefault(filename, []).append(name)
        return files
    single = directory / "model.safetensors"
    if single.is_file():
        return {"model.safetensors": SafetensorsFile(single).names()}
    raise SourceError(f"{directory}: no model.safetensors or model.safetensors.index.json")


def _open_files(directory: Path, files: dict[str, list[str]]) -> dict[str, SafetensorsFile]:
    opened = {}
    for filename, names in files.items():
        if not (directory / filename).is_file():
            raise SourceError(f"{directory / filename}: missing (listed in model.safetensors.index.json)")
        st = SafetensorsFile(directory / filename)
        for name in names:
            if name not in st:
                raise SourceError(f"{st.path}: has no tensor {name!r} (listed in model.safetensors.index.json)")
        opened[filename] = st
    return opened


def _canonical_entries(files: dict[str, list[str]], tied: bool) -> dict[str, tuple[str, str]]:
    """canonical name -> (file name, HF name); `mtp.*` kept, vision tensors dropped."""
    entries: dict[str, tuple[str, str]] = {}
    for filename in sorted(files):
        for hf_name in files[filename]:
            name = canonical_name(hf_name)
            if name is None or (tied and name == "lm_head.weight"):
                continue
            entries[name] = (filename, hf_name)
    return entries


def describe(ref: SourceRef) -> SourceInfo:
    directory = _directory(ref)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise SourceError(f"{directory}: no config.json")
    cfg = _Config(config_path, _read_json(config_path))
    arch = _architecture(cfg, directory)
    listed = _weight_files(directory)
    files = _open_files(directory, listed)
    entries = _canonical_entries(listed, arch.tie_word_embeddings)
    facts: list[tuple[str, object]] = [
        ("architectures", ", ".join(cfg.doc["architectures"])),
        ("format", "safetensors"),
        ("safetensors_files", len(files)),
        ("text_tensors", sum(1 for n in entries if not n.startswith("mtp."))),
        ("mtp_tensors", sum(1 for n in entries if n.startswith("mtp."))),
    ]
    if arch.mtp_num_layers and "mtp.fc.weight" not in entries:
        # transformers drops mtp.* when it re-saves a model: the config still declares a head the files lack.
        declared = arch.mtp_num_layers
        facts.append(("mtp_note", f"config declares {declared} MTP layer(s) but the weights hold no mtp.* tensors"))
        arch = replace(arch, mtp_num_layers=0)
    storage: dict[str, set[str]] = {}
    for name, (filename, hf_name) in entries.items():
        storage.setdefault(_group(name), set()).add(files[filename].dtype_code(hf_name))
    tokenizer = tuple(
        (fname, (directory / fname).read_bytes()) for fname in TOKENIZER_FILES if (directory / fname).is_file()
    )
    return SourceInfo(
        architecture=arch,
        storage=tuple(sorted((g, "+".join(sorted(d))) for g, d in storage.items())),
        tokenizer=tokenizer,
        facts=tuple(facts),
    )


def _group(canonical: str) -> str:
    parts = canonical.split(".")
    if parts[0] == "layers":
        return ".".join(parts[2:])
    if parts[:2] == ["mtp", "layers"]:
        return "mtp." + ".".join(parts[3:])
    return canonical


def open_weights(ref: SourceRef, info: SourceInfo) -> "HFWeightStore":
    directory = _directory(ref)
    arch = info.architecture
    listed = _weight_files(directory)
    files = _open_files(directory, listed)
    entries = _canonical_entries(listed, arch.tie_word_embeddings)
    store = HFWeightStore(files, entries, arch.tie_word_embeddings)
    for name, shape in canonical_shapes(arch).items():
        if name not in store:
            where = "embed_tokens.weight (tied)" if name == "lm_head.weight" and arch.tie_word_embeddings else name
            raise SourceError(f"{directory}: checkpoint has no tensor for {where} (needed by config.json)")
        if store.info(name).shape != shape:
            found = list(store.info(name).shape)
            raise SourceError(f"{directory}: tensor {name} has shape {found}, config.json implies {list(shape)}")
    return store


class HFWeightStore:
    """Canonical view of HF safetensors: memory-mapped, converting norms and A_log on read."""

    def __init__(self, files: dict[str, SafetensorsFile], entries: dict[str, tuple[str, str]], tied: bool):
        self._files = files
        self._entries = dict(entries)
        if tied and "embed_tokens.weight" in self._entries:
            self._entries["lm_head.weight"] = self._entries["embed_tokens.weight"]

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> Iterable[str]:
        return sorted(self._entries)

    def info(self, name: str) -> TensorInfo:
        filename, hf_name = self._entries[name]
        st = self._files[filename]
        dtype = "float32" if needs_conversion(name) else st.value_dtype(hf_name).name
        return TensorInfo(name, st.shape(hf_name), dtype)

    def read(self, name: str) -> Weight:
        filename, hf_name = self._entries[name]
        return to_canonical_value(name, self._files[filename].read(hf_name))

    def read_float(self, name: str) -> np.ndarray:
        value = self.read(name)
        return value if value.dtype == np.float32 else value.astype(np.float32)

    def close(self) -> None:
        for st in self._files.values():
            st.close()
