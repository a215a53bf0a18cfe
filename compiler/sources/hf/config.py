"""Hugging Face Qwen3.5 `config.json` -> Architecture, with errors naming the file and field (GLM-4.5's in `glm4moe.py`).

Reads the text model's fields (nested under `text_config` in the multimodal export,
or at the top level), `generation_config.json` for token ids, and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...util.diagnostics import SourceError
from ...ir import Architecture, LayerKind, LinearAttentionDims, MoeDims, Rope, TokenIds
from ..layer_layout import Declared, layer_kinds

# Far past any real model (Qwen3.5's largest has 64); the bound keeps a hostile config from sizing lists.
MAX_LAYERS = 10_000
DENSE_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
MOE_ARCHITECTURES = ("Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM")
# Qwen3.5's; the other families' are their modules' (`reader.FAMILIES`), which check what a config names.
SUPPORTED_ARCHITECTURES = DENSE_ARCHITECTURES + MOE_ARCHITECTURES


class Config:
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

    def flag(self, name: str, default: bool) -> bool:
        field, value = self.lookup(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(field, f"must be true or false, not {value!r}")
        return value

    def float(self, field: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"must be a number, not {value!r}")
        return float(value)


def read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SourceError(f"{path}: cannot read: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SourceError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SourceError(f"{path}: expected a JSON object")
    return doc


def _layer_kinds(cfg: Config, num_layers: int) -> tuple[LayerKind, ...]:
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


def _rope(cfg: Config, head_dim: int, default_factor: float = 0.25, *, position_rows: bool = True) -> Rope:
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
        factor = default_factor if value is None else cfg.float(field, value)
    section = params.get("mrope_section") or ()
    if not isinstance(section, (list, tuple)) or not all(isinstance(x, int) for x in section):
        raise cfg.fail(cfg.text_prefix + "rope_parameters.mrope_section", "must be a list of integers")
    if section and not position_rows:
        raise cfg.fail(cfg.text_prefix + "rope_parameters.mrope_section", "is given, but this model rotates one position per token")
    rope = Rope(theta, factor, head_dim, tuple(section), bool(params.get("mrope_interleaved", True)), position_rows)
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


def _token_ids(cfg: Config, directory: Path) -> TokenIds:
    """bos / eos / pad from generation_config.json, else config.json, else its text_config."""
    sources: list[tuple[Path, dict]] = []
    generation = directory / "generation_config.json"
    if generation.is_file():
        sources.append((generation, read_json(generation)))
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


def attention_sizes(cfg: Config) -> tuple[int, int, int, int, int]:
    """(hidden, heads, kv heads, head_dim, layers) of a top-level config (GLM-4.5), checked."""
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.int("num_key_value_heads", heads)
    if heads == 0 or kv_heads == 0 or heads % kv_heads:
        raise cfg.fail("num_key_value_heads", f"({kv_heads}) must divide num_attention_heads ({heads})")
    num_layers = cfg.int("num_hidden_layers")
    if num_layers > MAX_LAYERS:
        raise cfg.fail("num_hidden_layers", f"({num_layers}) is more than {MAX_LAYERS} layers")
    return hidden, heads, kv_heads, cfg.int("head_dim", hidden // heads), num_layers


def architecture(cfg: Config, directory: Path) -> Architecture:
    archs = cfg.doc["architectures"]  # checked by the reader
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
    if num_layers > MAX_LAYERS:
        # Layer lists are built from it before any tensor is seen: a hostile value must not size them.
        raise cfg.fail(cfg.text_prefix + "num_hidden_layers", f"({num_layers}) is more than {MAX_LAYERS} layers")
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
    moe = _moe(cfg, num_layers) if any(a in MOE_ARCHITECTURES for a in archs) else None
    return Architecture(
        family="qwen35moe" if moe is not None else "qwen35",
        hidden_size=hidden,
        # A MoE config has no dense FFN width; the experts' stands in where one is shown.
        intermediate_size=moe.expert_intermediate_size if moe is not None else cfg.int("intermediate_size"),
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
        moe=moe,
    )


def _moe(cfg: Config, num_layers: int) -> MoeDims:
    """Qwen3.5-MoE's sparse FFN; every layer is sparse (a config saying otherwise is refused, named)."""
    field, dense_layers = cfg.lookup("mlp_only_layers")
    if dense_layers:
        raise cfg.fail(field, f"lists dense layers {dense_layers!r}; Qwen3.5-MoE makes every layer sparse")
    field, step = cfg.lookup("decoder_sparse_step")
    if step not in (None, 1):
        raise cfg.fail(field, f"is {step!r}; Qwen3.5-MoE makes every layer sparse (step 1)")
    return softmax_moe(cfg, "Qwen3.5-MoE")


def softmax_moe(cfg: Config, model: str, dense_layers: int = 0) -> MoeDims:
    """Qwen's sparse block (Qwen3.5-MoE, Qwen3-Next): softmax top-k, renormalized, a sigmoid-gated shared expert."""
    experts = cfg.int("num_experts")
    top_k = cfg.int("num_experts_per_tok")
    if experts == 0 or not 0 < top_k <= experts:
        raise cfg.fail(cfg.text_prefix + "num_experts_per_tok", f"({top_k}) must be between 1 and num_experts ({experts})")
    expert_size = cfg.int("moe_intermediate_size")
    field, norm = cfg.lookup("norm_topk_prob")
    if norm is False:
        raise cfg.fail(field, f"is false; {model} renormalizes the top-k routing weights")
    return MoeDims(
        num_experts=experts,
        top_k=top_k,
        expert_intermediate_size=expert_size,
        shared_expert_intermediate_size=cfg.int("shared_expert_intermediate_size", expert_size),
        dense_layers=dense_layers,
    )
