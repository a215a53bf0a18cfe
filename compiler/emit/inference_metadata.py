"""onnx-genai's `inference_metadata.yaml` and its MTP sidecar declaration (`config.json`).

The one layout emitted is the one onnx-genai loads with its MTP proposer (`mtpc.profiles.onnx_genai`):
`flat`, the shape `Engine::from_dir` takes. No `pipeline` (a package with one goes to the pipeline
loader, which never reads the sidecar's declaration), no top-level `kv_cache` or `speculative` and no
`model.io.kv_update` (the metadata crate refuses them at that commit), the decoder's ports in
`model.io` (there is no workflow to infer them from), `model.vocab_size` (native MTP reads the target
vocabulary from it), and only capabilities the engine's default runtime admits.

The sidecar's `SpeculatorConfig` goes to `config.json` -> `speculator_config`, the only place
`detect_speculator` reads it from. Without an MTP head there is no config.json and the metadata
carries no trace of one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..util.diagnostics import Diagnostic, ExitCode, MtpcError
from ..ir import AttentionMode, DecoderConfig, HeadContract, LayerKind, ModelIR, TensorSpec
from ..profiles.onnx_genai import PROFILE
from ..schema.validation import dump_yaml, read_yaml
from .artifact import Artifact, EmitContext, from_document
from .speculator import SpeculatorConfig, contract_findings, speculator_findings

METADATA_FILE = "inference_metadata.yaml"
CONFIG_FILE = "config.json"
SCHEMA = "inference_metadata.flat.schema.json"
SPECULATOR_SCHEMA = "speculator_config.schema.json"
SCHEMA_VERSION = "v1"
LAYOUT = "flat"

# Per layer kind: (attention-cache role, cell prefix, past-name role key, present-name role key);
# a role of None is linear-attention state, replaced whole each step.
_LAYER_STATE = {
    LayerKind.FULL_ATTENTION: (
        ("key", "key", "past_key_names", "present_key_names"),
        ("value", "value", "past_value_names", "present_value_names"),
    ),
    LayerKind.SLIDING_ATTENTION: (
        ("key", "key", "past_key_names", "present_key_names"),
        ("value", "value", "past_value_names", "present_value_names"),
    ),
    LayerKind.LINEAR_ATTENTION: (
        (None, "conv", "past_conv_names", "present_conv_names"),
        (None, "recurrent", "past_recurrent_names", "present_recurrent_names"),
    ),
    LayerKind.FEED_FORWARD: (),
}
_LAYER_STATE[LayerKind.MAMBA2] = _LAYER_STATE[LayerKind.LINEAR_ATTENTION]  # its state has the same contract


@dataclass(frozen=True)
class _StatePort:
    role: str | None  # "key" / "value" for attention caches
    layer: int
    past: TensorSpec
    present: TensorSpec


def emit_inference_metadata(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    target = ir.targets.onnx_genai
    if target is None:
        return []
    # The spec rules refuse every other layout (the profile says why), and a paged main decoder with
    # this target: block-table inputs are an ABI this metadata cannot describe.
    if target.layout != LAYOUT:
        raise AssertionError(f"onnx-genai metadata layout {target.layout!r} is not emitted")
    if ir.main.attention is not AttentionMode.DENSE:
        raise AssertionError(f"onnx-genai needs a dense main decoder, not {ir.main.attention.value} attention")
    speculator, head = _speculator(ir)
    if speculator is not None:
        block = speculator.to_dict()
        problems = [f.message for f in speculator_findings(block, target_vocab_size=ir.architecture.vocab_size)]
        problems += contract_findings(block, ir.main.contract, head.contract)
        if problems:
            raise _internal([f"the MTP sidecar declaration would be refused: {p}" for p in problems])

    doc = metadata_document(ir, speculator)
    # The checks read the document; its text (a 64-layer model's ports, dumped through PyYAML's Python
    # representer and read back through its constructor) is made when the file is written or compared by
    # its bytes.
    render = lambda d: _render("inference_metadata.flat.yaml.j2", doc=d, speculator=speculator,  # noqa: E731
                               commit=PROFILE.commit[:7]).encode("utf-8")
    artifacts = [from_document(METADATA_FILE, doc, render, lambda data: read_yaml(data.decode("utf-8")), schema=SCHEMA)]
    if speculator is not None:
        config = {"speculator_config": speculator.to_dict()}
        data = json.dumps(config, indent=2) + "\n"
        read_back = json.loads(data)
        _check_read_back(CONFIG_FILE, read_back, config)
        artifacts.append(Artifact(CONFIG_FILE, data.encode("utf-8"), schema=SPECULATOR_SCHEMA).with_document(read_back))
    return artifacts


def _speculator(ir: ModelIR) -> tuple[SpeculatorConfig | None, DecoderConfig | None]:
    if not ir.mtp.emit_head:
        return None, None
    head = ir.head(HeadContract.ONNX_GENAI)
    if head is None:
        raise _internal(["the MTP head is to be emitted but the IR has no onnx-genai head decoder"])
    # The embedding and LM head are borrowed by name (`contracts`); lowering refuses forms the sidecar
    # cannot take (spec/borrowed_weights.py), and compile's contract check holds the graphs to it.
    return SpeculatorConfig.for_head(ir, head), head


# ----------------------------------------------------------------------------- the document


def _attention(ir: ModelIR) -> dict:
    arch = ir.architecture
    attention = {
        "type": "grouped_query_attention" if arch.num_key_value_heads < arch.num_attention_heads else "multi_head_attention",
        "num_attention_heads": arch.num_attention_heads,
        "num_kv_heads": arch.num_key_value_heads,
        "head_dim": arch.head_dim,
    }
    if arch.sliding_window is not None and LayerKind.SLIDING_ATTENTION in arch.layer_kinds:
        attention["sliding_window"] = arch.sliding_window
    return attention


def _state_ports(main: DecoderConfig) -> list[_StatePort]:
    ports = []
    for layer, kind in enumerate(main.layer_kinds):
        for role, prefix, past_key, present_key in _LAYER_STATE[kind]:
            past_template, present_template = main.input_name(past_key), main.output_name(present_key)
            if past_template is None or present_template is None:
                raise _internal([f"the main decoder names no {past_key} / {present_key} for its {kind.value} layer {layer}"])
            ports.append(_StatePort(role, layer, main.contract.input(past_template % layer), main.contract.output(present_template % layer)))
    return ports


def _graph_name(decoder: DecoderConfig, role: str, *, output: bool = False) -> str:
    name = decoder.output_name(role) if output else decoder.input_name(role)
    if name is None:
        raise _internal([f"{decoder.filename} names no {role} {'output' if output else 'input'}"])
    return name


def metadata_document(ir: ModelIR, speculator: SpeculatorConfig | None) -> dict:
    main = ir.main
    ports = _state_ports(main)
    kv = [p for p in ports if p.role is not None]
    carried = [p for p in ports if p.role is None]
    io: dict = {
        "sequence_source": "token_ids",
        "token_input": _graph_name(main, "input_ids"),
        "attention_mask_input": _graph_name(main, "attention_mask"),
        "position_ids_input": _graph_name(main, "position_ids"),
        "logits_output": _graph_name(main, "logits", output=True),
    }
    if speculator is not None:
        io["hidden_output"] = speculator.target_hidden_output  # the seed the sidecar reads
    io.update(kv_ownership="owned", kv_layout="head_major_bnsh")
    if kv:
        io["kv_inputs"] = [p.past.name for p in kv]
        io["kv_outputs"] = [p.present.name for p in kv]
    if carried:
        io["state_pairs"] = [
            {"input": p.past.name, "output": p.present.name, "init": "zeros", "update": "replace"} for p in carried
        ]
    attention = _attention(ir)
    capabilities = ["kv_cache", attention["type"]]
    refused = [c for c in capabilities if c not in PROFILE.runtime_capabilities]
    if refused:
        raise _internal([f"Engine::from_dir would refuse the capabilities {refused}"])
    arch = ir.architecture
    return {
        "schema_version": SCHEMA_VERSION,
        "required_capabilities": capabilities,
        "model": {
            "vocab_size": arch.vocab_size,
            "max_sequence_length": arch.context_length,
            "attention": attention,
            "io": io,
        },
    }


# ----------------------------------------------------------------------------- rendering and self-checks


def _to_yaml(mapping: dict) -> str:
    # Block style for structure, flow style for leaf lists and maps: compact and still diffable.
    # A top-level section that is itself a leaf would come out as one flow map (`{key: value}`),
    # which cannot share a document with the other sections, so that one is written in block style.
    for flow in (None, False):
        text = dump_yaml(mapping, sort_keys=False, default_flow_style=flow, width=4096, allow_unicode=True)
        if not text.startswith("{"):
            return text.rstrip("\n")
    raise AssertionError("block style never starts with a flow mapping")


def _render(template: str, **context) -> str:
    from importlib import resources

    import jinja2

    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["to_yaml"] = _to_yaml
    source = resources.files("mtpc.templates").joinpath(template).read_text(encoding="utf-8")
    return env.from_string(source).render(**context)


def _check_read_back(relpath: str, parsed, intended: dict) -> None:
    """What we serialised must read back as what we meant (the driver checks it against its schema)."""
    if parsed != intended:
        raise _internal([f"{relpath} does not read back as the document it was rendered from"])


def _internal(messages: list[str]) -> MtpcError:
    return MtpcError([Diagnostic(m) for m in messages], ExitCode.INTERNAL)
