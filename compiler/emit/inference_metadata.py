"""onnx-genai's `inference_metadata.yaml`, in the layout the target names, and its MTP sidecar declaration.

- `workflow` (onnx-genai after #828): closed root, the decoder ABI as `pipeline.workflow`,
  model state as runtime-served groups. The sidecar's `SpeculatorConfig` may not appear
  in this file; it goes to `config.json` -> `speculator_config`.
- `flat` (onnx-genai before #828): `model.io` port lists, `kv_cache`, and the
  `SpeculatorConfig` itself as the top-level `speculative:` block.

Without an MTP head the metadata carries no trace of one. Both layouts report
`schema_version: v1`; only the keys tell them apart (shared/reference/inference-metadata.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..ir.contracts import BATCH
from ..util.diagnostics import Diagnostic, ExitCode, MtpcError
from ..ir import AttentionMode, DecoderConfig, HeadContract, LayerKind, ModelIR, TensorSpec
from ..schema.validation import dump_yaml, read_yaml
from .artifact import Artifact, EmitContext
from .speculator import SpeculatorConfig, contract_findings, speculator_findings

METADATA_FILE = "inference_metadata.yaml"
CONFIG_FILE = "config.json"
SCHEMAS = {"workflow": "inference_metadata.workflow.schema.json", "flat": "inference_metadata.flat.schema.json"}
SPECULATOR_SCHEMA = "speculator_config.schema.json"
SCHEMA_VERSION = "v1"

DECODER = "decoder"
SIDECAR = "mtp_sidecar"

# onnx-genai's workflow validator requires every capability the document uses to be listed.
WORKFLOW_CAPABILITIES = ("workflow_ssa", "typed_emit", "serving_service_contract")
FLAT_CAPABILITIES = ("kv_cache", "grouped_query_attention")


@dataclass(frozen=True)
class _GroupKind:
    kind: str
    layout: str
    update: str
    sequence_axis: int | None = None
    evictable_prefix: bool = False


# State groups in output order. Conv history and the GatedDeltaNet accumulator are separate
# `recurrent` groups: each is replaced whole per step, so neither may carry a sequence axis.
_GROUPS = {
    "full_attention": _GroupKind("full_attention", "bnsh", "append", sequence_axis=2),
    "sliding_attention": _GroupKind("sliding_attention", "bnsh", "append", sequence_axis=2, evictable_prefix=True),
    "linear_conv": _GroupKind("recurrent", "bch", "replace"),
    "linear_recurrent": _GroupKind("recurrent", "bhkv", "replace"),
}

# Per layer kind: (state group, alias role, cell prefix, past-name role key, present-name role key).
_LAYER_STATE = {
    LayerKind.FULL_ATTENTION: (
        ("full_attention", "key", "key", "past_key_names", "present_key_names"),
        ("full_attention", "value", "value", "past_value_names", "present_value_names"),
    ),
    LayerKind.SLIDING_ATTENTION: (
        ("sliding_attention", "key", "key", "past_key_names", "present_key_names"),
        ("sliding_attention", "value", "value", "past_value_names", "present_value_names"),
    ),
    LayerKind.LINEAR_ATTENTION: (
        ("linear_conv", None, "conv", "past_conv_names", "present_conv_names"),
        ("linear_recurrent", None, "recurrent", "past_recurrent_names", "present_recurrent_names"),
    ),
}


@dataclass(frozen=True)
class _StatePort:
    cell: str
    group: str
    role: str | None  # "key" / "value" for attention caches
    layer: int
    past: TensorSpec
    present: TensorSpec


def emit_inference_metadata(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    target = ir.targets.onnx_genai
    if target is None:
        return []
    # The spec schema allows only these layouts, and its rules refuse a paged main decoder with this
    # target: block-table inputs are an ABI this metadata cannot describe.
    if target.layout not in SCHEMAS:
        raise AssertionError(f"unknown onnx-genai metadata layout {target.layout!r}")
    if ir.main.attention is not AttentionMode.DENSE:
        raise AssertionError(f"onnx-genai needs a dense main decoder, not {ir.main.attention.value} attention")
    speculator, head = _speculator(ir)
    if speculator is not None:
        block = speculator.to_dict()
        problems = speculator_findings(block, target_vocab_size=ir.architecture.vocab_size)
        problems += contract_findings(block, ir.main.contract, head.contract)
        if problems:
            raise _internal([f"the MTP sidecar declaration would be refused: {p}" for p in problems])

    doc = workflow_document(ir, speculator, head) if target.layout == "workflow" else flat_document(ir, speculator)
    text = _render(f"inference_metadata.{target.layout}.yaml.j2", doc=doc, speculator=speculator)
    read_back = read_yaml(text)
    _check_read_back(METADATA_FILE, read_back, doc)
    artifacts = [Artifact(METADATA_FILE, text.encode("utf-8"), schema=SCHEMAS[target.layout]).with_document(read_back)]
    if speculator is not None and target.layout == "workflow":
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


# ----------------------------------------------------------------------------- documents


def _model_section(ir: ModelIR) -> dict:
    arch = ir.architecture
    attention = {
        "type": "grouped_query_attention" if arch.num_key_value_heads < arch.num_attention_heads else "multi_head_attention",
        "num_attention_heads": arch.num_attention_heads,
        "num_kv_heads": arch.num_key_value_heads,
        "head_dim": arch.head_dim,
    }
    if arch.sliding_window is not None and LayerKind.SLIDING_ATTENTION in arch.layer_kinds:
        attention["sliding_window"] = arch.sliding_window
    return {"vocab_size": arch.vocab_size, "max_sequence_length": arch.context_length, "attention": attention}


def _state_ports(main: DecoderConfig) -> list[_StatePort]:
    ports = []
    for layer, kind in enumerate(main.layer_kinds):
        for group, role, prefix, past_key, present_key in _LAYER_STATE[kind]:
            past_template, present_template = main.input_name(past_key), main.output_name(present_key)
            if past_template is None or present_template is None:
                raise _internal([f"the main decoder names no {past_key} / {present_key} for its {kind.value} layer {layer}"])
            past = main.contract.input(past_template % layer)
            present = main.contract.output(present_template % layer)
            ports.append(_StatePort(f"{prefix}_{layer}", group, role, layer, past, present))
    return ports


def _graph_name(decoder: DecoderConfig, role: str, *, output: bool = False) -> str:
    name = decoder.output_name(role) if output else decoder.input_name(role)
    if name is None:
        raise _internal([f"{decoder.filename} names no {role} {'output' if output else 'input'}"])
    return name


def _request_aligned(spec: TensorSpec) -> dict:
    return {
        "dtype": spec.dtype,
        "rank": len(spec.shape),
        "shape": list(spec.shape),
        "batch_layout": {"kind": "request_aligned", "axis": 0},
    }


def _application_input(spec: TensorSpec, name: str) -> dict:
    return {"contract": _request_aligned(spec), "role": {"kind": "opaque"}, "source": {"kind": "application", "name": name}}


def workflow_document(ir: ModelIR, speculator: SpeculatorConfig | None, head: DecoderConfig | None) -> dict:
    main = ir.main
    token = _graph_name(main, "input_ids")
    logits = _graph_name(main, "logits", output=True)
    ports = _state_ports(main)

    inputs = {
        "request.active": _application_input(TensorSpec("active", "bool", (BATCH,)), "active"),
        "request.done": _application_input(TensorSpec("done", "bool", (BATCH,)), "done"),
        "request.accepted_len": _application_input(TensorSpec("accepted_len", "int64", (BATCH,)), "accepted_len"),
        f"request.{token}": {
            "contract": _request_aligned(main.contract.input(token)),
            "role": {"kind": "runtime", "version": "1.0", "role": "prompt_tokens"},
            "source": {"kind": "request"},
        },
    }
    for port in ports:
        inputs[f"request.{port.cell}"] = _application_input(port.past, port.cell)

    # Ports are inferred from the ONNX artifacts; roles name the ones the runtime drives itself.
    roles = {
        token: "token_ids",
        _graph_name(main, "attention_mask"): "attention_mask",
        _graph_name(main, "position_ids"): "position_ids",
        logits: "logits",
    }
    if speculator is not None:
        roles[speculator.target_hidden_output] = "hidden_states"  # the seed the sidecar reads
    components = {DECODER: {"implementation": {"kind": "onnx", "artifact": main.filename}, "ports": {"roles": roles}}}
    if speculator is not None and head is not None:
        # Neither a logits role nor a state group: the sidecar must not look like a second decoder,
        # or onnx-genai can no longer derive the decode ABI. Its KV stays proposal-local.
        components[SIDECAR] = {
            "implementation": {"kind": "onnx", "artifact": speculator.model},
            "ports": {
                "roles": {
                    _graph_name(head, "inputs_embeds"): "inputs_embeds",
                    _graph_name(head, "attention_mask"): "attention_mask",
                    _graph_name(head, "position_ids"): "position_ids",
                    speculator.mtp_hidden_output: "hidden_states",
                }
            },
        }

    state = {
        port.cell: {
            "contract": _request_aligned(port.past),
            "scope": "invocation",
            "initializer": f"request.{port.cell}",
            "recurrence": {"kind": "invariant"},
            "management": "runtime",
            "release_boundary": "invocation",
            "service_group": port.group,
        }
        for port in ports
    }
    invoke_inputs = {token: f"request.{token}"}
    invoke_outputs = {logits: f"{DECODER}.{logits}"}
    for port in ports:
        invoke_inputs[port.past.name] = f"request.{port.cell}"
        invoke_outputs[port.present.name] = f"{DECODER}.{port.cell}"
    steps = [
        {"kind": "invoke", "component": DECODER, "inputs": invoke_inputs, "outputs": invoke_outputs},
        {"kind": "emit", "value": f"{DECODER}.{logits}", "output": logits, "mode": "replace"},
    ]

    return {
        "schema_version": SCHEMA_VERSION,
        "model": _model_section(ir),
        "pipeline": {
            "workflow": {
                "manifest": {"capabilities": list(WORKFLOW_CAPABILITIES)},
                "inputs": inputs,
                "outputs": {
                    logits: {
                        "contract": _request_aligned(main.contract.output(logits)),
                        "role": "tensor",
                        "stage": "pre_adapter",
                    }
                },
                "components": components,
                "state": state,
                "steps": steps,
                "serving": {
                    "active": "request.active",
                    "done": "request.done",
                    "accepted_len": "request.accepted_len",
                    "state_service": {"groups": _state_groups(ports, speculator)},
                },
            }
        },
    }


def _state_groups(ports: list[_StatePort], speculator: SpeculatorConfig | None) -> dict:
    used = [name for name in _GROUPS if any(p.group == name for p in ports)]
    groups = {}
    for name in used:
        kind = _GROUPS[name]
        group: dict = {"kind": kind.kind}
        if kind.sequence_axis is not None:
            group["sequence_axis"] = kind.sequence_axis
        group["layout"] = kind.layout
        group["update"] = {"kind": kind.update}
        capabilities: dict = {}
        if speculator is not None:
            # A verification step may reject every draft after the guaranteed token.
            capabilities["rollback_positions"] = 1 + speculator.num_speculative_tokens
        capabilities.update(snapshot=True, fork=True)
        others = [other for other in used if other != name]
        if others:
            # Layers of one model advance together: no group may commit or roll back alone.
            capabilities["cascade"] = others
        group["capabilities"] = capabilities
        if kind.evictable_prefix:
            group["reuse"] = {"evictable_prefix": True}
        aliases = {}
        for port in ports:
            if port.group != name:
                continue
            alias = {"input": port.past.name, "output": port.present.name}
            if port.role is not None:
                alias["role"] = port.role
            alias["layer"] = port.layer
            aliases[port.cell] = alias
        group["ports"] = {DECODER: aliases}
        groups[name] = group
    return groups


def flat_document(ir: ModelIR, speculator: SpeculatorConfig | None) -> dict:
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
        io["hidden_output"] = speculator.target_hidden_output
    io.update(kv_ownership="owned", kv_update="append", kv_layout="head_major_bnsh")
    if kv:
        io["kv_inputs"] = [p.past.name for p in kv]
        io["kv_outputs"] = [p.present.name for p in kv]
    if carried:
        io["state_pairs"] = [
            {"input": p.past.name, "output": p.present.name, "init": "zeros", "update": "replace"} for p in carried
        ]
    doc = {
        "schema_version": SCHEMA_VERSION,
        "required_capabilities": list(FLAT_CAPABILITIES),
        "model": {**_model_section(ir), "io": io},
        "kv_cache": {"native_dtype": ir.precision.io_dtype},
    }
    if speculator is not None:
        doc["speculative"] = speculator.to_dict()
    return doc


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
