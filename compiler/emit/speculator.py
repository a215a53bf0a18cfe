"""onnx-genai's MTP sidecar declaration (`SpeculatorConfig`) and the rules its reader applies.

Serialised to `config.json` -> `speculator_config`, the one place onnx-genai's
`detect_speculator` reads it from (onnx-genai-metadata src/parser.rs at ac9c7dd). The
fields, `resolve_mtp` and `validate_resolved_mtp_config` are described in
shared/reference/inference-metadata.md §4.

`speculator_findings` and `contract_findings` check a parsed block, so they work
on what we are about to write as well as on a package on disk (`mtpc check`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..ir.contracts import EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER
from ..ir import DecoderConfig, GraphContract, ModelIR

PROPOSAL_TYPE = "mtp"
# Qwen3.5 heads read a rank-3 [B, S, H] seed. onnx-genai defaults to BSHC when the key is absent,
# which then fails at load against a rank-3 seed, so the layout is always written out.
HIDDEN_LAYOUT = "BSH"
# The only executable mode: the sidecar's KV is reset every verification iteration.
KV_MODE = "proposal_local"
WEIGHT_SOURCE = "target_initializer"

_LAYOUTS = ("BSH", "BSHC")
_KV_MODES = ("proposal_local", "accepted_prefix")
_FLOAT_DTYPES = ("float32", "float16", "bfloat16")
# Defaults `resolve_mtp` fills in for absent keys.
_DEFAULT_TARGET_HIDDEN_OUTPUT = "hidden_states"
_DEFAULT_MTP_HIDDEN_OUTPUT = "mtp_hidden"


@dataclass(frozen=True)
class TargetInitializer:
    """A weight the sidecar borrows from the target graph, by exact initializer name."""

    name: str
    source: str = WEIGHT_SOURCE

    def to_dict(self) -> dict:
        return {"source": self.source, "name": self.name}


@dataclass(frozen=True)
class SpeculatorConfig:
    model: str  # package-relative path of the sidecar graph
    num_speculative_tokens: int  # drafts after the guaranteed target token
    target_hidden_output: str
    target_hidden_size: int
    mtp_hidden_output: str
    embedding: TargetInitializer
    lm_head: TargetInitializer
    # Ignored by the MTP path (it reads the target's `model.vocab_size`); written for readers.
    vocab_size: int
    proposal_type: str = PROPOSAL_TYPE
    target_hidden_layout: str = HIDDEN_LAYOUT
    hc_mult: int = 1
    kv_mode: str = KV_MODE

    @classmethod
    def for_head(cls, ir: ModelIR, head: DecoderConfig) -> "SpeculatorConfig":
        seed = ir.main.output_name("hidden_states")
        mtp_hidden = head.output_name("hidden_states")
        if seed is None or mtp_hidden is None:
            raise AssertionError("the main decoder and the onnx-genai head must both name a hidden_states output")
        return cls(
            model=head.filename,
            num_speculative_tokens=ir.mtp.num_speculative_tokens,
            target_hidden_output=seed,
            target_hidden_size=ir.architecture.hidden_size,
            mtp_hidden_output=mtp_hidden,
            embedding=TargetInitializer(EMBEDDING_INITIALIZER),
            lm_head=TargetInitializer(LM_HEAD_INITIALIZER),
            vocab_size=ir.architecture.vocab_size,
        )

    def to_dict(self) -> dict:
        # The order of §4.6 of the reference, so the YAML reads like the upstream example.
        return {
            "proposal_type": self.proposal_type,
            "model": self.model,
            "num_speculative_tokens": self.num_speculative_tokens,
            "target_hidden_output": self.target_hidden_output,
            "target_hidden_layout": self.target_hidden_layout,
            "target_hidden_size": self.target_hidden_size,
            "hc_mult": self.hc_mult,
            "mtp_hidden_output": self.mtp_hidden_output,
            "kv_mode": self.kv_mode,
            "embedding": self.embedding.to_dict(),
            "lm_head": self.lm_head.to_dict(),
            "vocab_size": self.vocab_size,
        }


@dataclass(frozen=True)
class BlockFinding:
    """Why onnx-genai would refuse a `SpeculatorConfig`, at the field to change.

    `field`: the key path inside the block (() for the block itself; a missing key's own path, which
    a position lookup places at its parent); with `in_metadata`, a path in the target's inference
    metadata instead (`model.vocab_size`). `dropped`: the block does not
    deserialize, so onnx-genai's `detect_speculator` drops it without an error and the model loads
    without speculation.
    """

    field: tuple[str, ...]
    message: str
    dropped: bool = False
    in_metadata: bool = False


def speculator_findings(block: Mapping, *, target_vocab_size: int | None) -> list[BlockFinding]:
    """Why onnx-genai (or our stricter gate) would refuse this MTP `SpeculatorConfig`; empty if nothing.

    Layers, as the runtime applies them: the structure serde would refuse (a failure there
    drops the whole block), then `resolve_mtp` and `validate_resolved_mtp_config` (first
    failure wins in each, with onnx-genai's own messages), then the metadata-only load-time
    refusal of `accepted_prefix`, then our rule that the layout is explicit.
    `target_vocab_size` is the target package's `model.vocab_size` (None when undeclared).
    """
    structural = _structure_findings(block)
    if structural:
        return structural
    resolved = _resolve_mtp(block)
    if isinstance(resolved, BlockFinding):
        return [resolved]
    findings = []
    problem = _validate_resolved(resolved, target_vocab_size)
    if problem:
        findings.append(problem)
    if resolved["kv_mode"] == "accepted_prefix":
        findings.append(BlockFinding(
            ("kv_mode",),
            "MTP kv_mode accepted_prefix is declared but not executable: the frozen Mobius contract does not "
            "define correction-token/cache alignment",
        ))
    if block.get("target_hidden_layout") is None:
        findings.append(BlockFinding(
            ("target_hidden_layout",), "`target_hidden_layout` must be explicit: the runtime default BSHC does not match a rank-3 [B, S, H] seed"
        ))
    return findings


def _is_count(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _structure_findings(block: Mapping) -> list[BlockFinding]:
    """What makes serde refuse the block (onnx-genai-metadata schema/generation.rs): each drops it whole."""
    if not isinstance(block, Mapping):
        return [BlockFinding((), "the speculator config must be a mapping", dropped=True)]
    findings = []
    proposal = block.get("proposal_type")
    if not isinstance(proposal, str):
        findings.append(BlockFinding(("proposal_type",), f"`proposal_type` must be the string `mtp`, not {proposal!r}",
                                     dropped=True))
    elif proposal.lower() != PROPOSAL_TYPE:  # parses, as another proposer (or an unknown one)
        findings.append(BlockFinding(("proposal_type",), f"`proposal_type` must be `mtp` (case-insensitive), not {proposal!r}"))
    for key in ("model", "target_hidden_output", "mtp_hidden_output", "mtp_state_output"):
        if block.get(key) is not None and not isinstance(block[key], str):
            findings.append(BlockFinding((key,), f"`{key}` must be a string", dropped=True))
    # Zero parses (usize) and is refused later by `resolve_mtp` with its own message; MTP ignores
    # `vocab_size`, so only the schema's minimum applies to it. Only `num_speculative_tokens` may not be null.
    for key, minimum in (("num_speculative_tokens", 0), ("target_hidden_size", 0), ("hc_mult", 0), ("vocab_size", 1)):
        if key not in block or (block[key] is None and key != "num_speculative_tokens"):
            continue
        if not _is_count(block[key], minimum):
            findings.append(BlockFinding((key,), f"`{key}` must be an integer >= {minimum}, not {block[key]!r}",
                                         dropped=not _is_count(block[key], 0)))
    if block.get("target_hidden_layout") is not None and block["target_hidden_layout"] not in _LAYOUTS:
        findings.append(BlockFinding(("target_hidden_layout",),
                                     f"`target_hidden_layout` must be one of {', '.join(_LAYOUTS)} (case-sensitive)", dropped=True))
    if block.get("kv_mode") is not None and block["kv_mode"] not in _KV_MODES:
        findings.append(BlockFinding(("kv_mode",), f"`kv_mode` must be one of {', '.join(_KV_MODES)}", dropped=True))
    for key in ("embedding", "lm_head"):
        ref = block.get(key)
        if ref is None:
            continue
        if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
            findings.append(BlockFinding((key,), f"`{key}` must be {{source: {WEIGHT_SOURCE}, name: <target initializer>}}",
                                         dropped=True))
        elif ref.get("source") != WEIGHT_SOURCE:
            findings.append(BlockFinding((key, "source"), f"`{key}.source` must be `{WEIGHT_SOURCE}`", dropped=True))
    return findings


def _resolve_mtp(block: Mapping) -> dict | BlockFinding:
    """onnx-genai's `resolve_mtp` (onnx-genai-metadata parser.rs): the resolved fields, or its first error."""
    if not block.get("model"):
        return BlockFinding(("model",), "mtp metadata is missing `model`")
    if not block.get("target_hidden_size"):
        return BlockFinding(("target_hidden_size",), "mtp metadata is missing `target_hidden_size`")
    if not block.get("hc_mult"):
        return BlockFinding(("hc_mult",), "mtp metadata is missing `hc_mult`")
    for key in ("embedding", "lm_head"):
        if block.get(key) is None:
            return BlockFinding((key,), f"mtp metadata is missing `{key}`")
        if block[key]["name"] == "":
            return BlockFinding((key, "name"), f"mtp metadata `{key}.name` must not be empty")
    if block.get("num_speculative_tokens", 4) == 0:
        return BlockFinding(("num_speculative_tokens",), "mtp metadata `num_speculative_tokens` must be greater than zero")
    return {
        "target_hidden_output": _or(block, "target_hidden_output", _DEFAULT_TARGET_HIDDEN_OUTPUT),
        "target_hidden_layout": _or(block, "target_hidden_layout", "BSHC"),
        "target_hidden_size": block["target_hidden_size"],
        "hc_mult": block["hc_mult"],
        "mtp_hidden_output": _or(block, "mtp_hidden_output", _DEFAULT_MTP_HIDDEN_OUTPUT),
        "mtp_state_output": block.get("mtp_state_output"),
        "kv_mode": _or(block, "kv_mode", KV_MODE),
    }


def _or(block: Mapping, key: str, default):
    """serde's `Option`: an absent key and an explicit null both take the default."""
    value = block.get(key)
    return default if value is None else value


def _validate_resolved(resolved: dict, target_vocab_size: int | None) -> BlockFinding | None:
    """onnx-genai's `validate_resolved_mtp_config`, minus the checks `_resolve_mtp` already guarantees."""
    if target_vocab_size is None:
        return BlockFinding(
            ("model", "vocab_size"),
            "native MTP speculation requires the target vocabulary size; declare `model.vocab_size` in the "
            "package metadata",
            in_metadata=True,
        )
    if resolved["target_hidden_output"] == "":
        return BlockFinding(("target_hidden_output",), "MTP target_hidden_output must not be empty")
    if target_vocab_size == 0:
        return BlockFinding(("model", "vocab_size"), "MTP vocab_size and hidden_size must be greater than zero", in_metadata=True)
    if resolved["mtp_hidden_output"] == "":
        return BlockFinding(("mtp_hidden_output",), "MTP mtp_hidden_output must not be empty")
    if resolved["mtp_state_output"] == "":
        return BlockFinding(("mtp_state_output",), "MTP mtp_state_output must not be empty when provided")
    if resolved["target_hidden_layout"] == "BSH" and resolved["hc_mult"] != 1:
        return BlockFinding(("hc_mult",), "MTP BSH target_hidden_layout requires hc_mult == 1")
    if resolved["hc_mult"] > 1 and resolved["mtp_state_output"] is None:
        return BlockFinding(("hc_mult",), "MTP hc_mult > 1 requires mtp_state_output")
    return None


def contract_findings(block: Mapping, main: GraphContract, head: GraphContract) -> list[str]:
    """The load-time checks onnx-genai makes of both graphs, asked of their I/O contracts.

    Initializer names and shapes need the graphs themselves; this covers names, ranks,
    static widths and dtypes of the seed, the head's inputs and its outputs.
    """
    findings: list[str] = []
    width = block.get("target_hidden_size")
    bsh = block.get("target_hidden_layout", "BSHC") == "BSH"
    seed_name = block.get("target_hidden_output", _DEFAULT_TARGET_HIDDEN_OUTPUT)
    hidden_name = block.get("mtp_hidden_output", _DEFAULT_MTP_HIDDEN_OUTPUT)

    if not main.has_output(seed_name):
        findings.append(f"native MTP target model must expose hidden-state output '{seed_name}'")
        seed = None
    else:
        seed = main.output(seed_name)
        if bsh and (len(seed.shape) != 3 or seed.shape[-1] != width):
            findings.append(f"target hidden output '{seed_name}' shape {list(seed.shape)} is not [B, S, {width}] (BSH)")

    head_tensors = {}
    for name, present in (
        ("inputs_embeds", head.has_input("inputs_embeds")),
        ("hidden_states", head.has_input("hidden_states")),
        (hidden_name, head.has_output(hidden_name)),
    ):
        if not present:
            findings.append(f"MTP head graph has no tensor named '{name}'")
        else:
            head_tensors[name] = head.input(name) if head.has_input(name) else head.output(name)
    embeds = head_tensors.get("inputs_embeds")
    if embeds is not None and embeds.shape[-1] != width:
        findings.append(f"MTP head hidden size {embeds.shape[-1]} does not match configured target hidden size {width}")
    hidden_in = head_tensors.get("hidden_states")
    if hidden_in is not None and bsh and len(hidden_in.shape) != 3:
        findings.append(f"MTP head input 'hidden_states' must be rank 3 for BSH, not {len(hidden_in.shape)}")
    dtypes = {t.dtype for t in head_tensors.values()} | ({seed.dtype} if seed is not None else set())
    if len(dtypes) > 1 or not dtypes <= set(_FLOAT_DTYPES):
        findings.append(f"the seed, inputs_embeds, hidden_states and '{hidden_name}' must share one float dtype, not {sorted(dtypes)}")

    if head.has_input("position_ids"):
        positions = head.input("position_ids")
        if positions.dtype != "int64" or len(positions.shape) != 2:
            findings.append("MTP head input 'position_ids' must be int64 of rank 2 (absolute target positions)")
    if head.has_input("attention_mask") and head.input("attention_mask").dtype != "int64":
        findings.append("MTP head input 'attention_mask' must be int64")
    for tensor in head.all():
        is_kv = ("past_key_values." in tensor.name or "present" in tensor.name) and tensor.name.endswith((".key", ".value"))
        if not is_kv:
            continue
        sequence_axis = len(tensor.shape) - 2
        if len(tensor.shape) < 3 or any(
            not isinstance(dim, int) for axis, dim in enumerate(tensor.shape) if axis not in (0, sequence_axis)
        ):
            findings.append(f"MTP head KV tensor '{tensor.name}' {list(tensor.shape)} needs every dim but batch and sequence static")
    return findings
