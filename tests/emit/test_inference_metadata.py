"""onnx-genai metadata: both layouts, with and without an MTP head, against the upstream schemas and rules.

Expected values come from the upstream schemas in shared/conformance/onnx-genai/, the rule
tables of shared/reference/inference-metadata.md, and the fixture architecture itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import jsonschema
import pytest
import yaml

from mtpc.ir import contracts
from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.emit.inference_metadata import emit_inference_metadata
from mtpc.emit.speculator import contract_findings, speculator_findings
from mtpc.ir import (
    AttentionMode,
    DecoderConfig,
    HeadContract,
    LayerKind,
    ModelIR,
    MtpSettings,
    OnnxGenaiTarget,
    Precision,
    QuantizationPlan,
    QuantOverride,
    QuantScheme,
    SourceRef,
    Targets,
)
from mtpc.schema.validation import errors as our_schema_errors
from tests.fixtures.arch import tiny_arch
from tests.fixtures.shared import shared_file

REPO = Path(__file__).resolve().parents[2]
SIDECAR = "mtp_sidecar.onnx"
NUM_SPECULATIVE_TOKENS = 2
LAYOUTS = ("workflow", "flat")
DTYPES = ("float32", "float16")


def build_ir(layout: str = "workflow", *, with_head: bool = True, io_dtype: str = "float32", arch=None, **changes) -> ModelIR:
    arch = arch or tiny_arch()
    precision = Precision(io_dtype=io_dtype)
    heads = ()
    if with_head:
        head = DecoderConfig(
            filename=SIDECAR,
            hidden_size=arch.hidden_size,
            num_attention_heads=arch.num_attention_heads,
            num_key_value_heads=arch.num_key_value_heads,
            head_size=arch.head_dim,
            layer_kinds=(LayerKind.FULL_ATTENTION,),
            inputs=tuple(contracts.ONNX_GENAI_HEAD_INPUT_NAMES.items()),
            outputs=tuple(contracts.ONNX_GENAI_HEAD_OUTPUT_NAMES.items()),
            contract=contracts.onnx_genai_head_contract(arch, precision),
        )
        heads = ((HeadContract.ONNX_GENAI, head),)
    ir = ModelIR(
        name="tiny",
        spec_path=None,
        source=SourceRef("synthetic", seed=0),
        architecture=arch,
        mtp=MtpSettings(num_speculative_tokens=NUM_SPECULATIVE_TOKENS, emit_head=with_head),
        precision=precision,
        quantization=QuantizationPlan(),
        targets=Targets(onnx_genai=OnnxGenaiTarget(layout=layout)),
        main=contracts.main_decoder_config(arch, precision),
        heads=heads,
    )
    return replace(ir, **changes)


def emit(ir: ModelIR) -> dict[str, bytes]:
    return {a.relpath: a.read() for a in emit_inference_metadata(ir, None)}


def metadata(files: dict[str, bytes]) -> dict:
    return yaml.safe_load(files["inference_metadata.yaml"].decode("utf-8"))


def upstream_errors(layout: str, instance) -> list[str]:
    path = shared_file(f"conformance/onnx-genai/{layout}-layout.schema.json")
    schema = json.loads(path.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(instance)]


@lru_cache(maxsize=None)
def _emitted(layout: str, with_head: bool, dtype: str):
    ir = build_ir(layout, with_head=with_head, io_dtype=dtype)
    return layout, with_head, ir, emit(ir)


def _cases(heads=(True, False)):
    return [
        pytest.param((layout, head, dtype), id=f"{layout}-{'head' if head else 'nohead'}-{dtype}")
        for layout in LAYOUTS
        for head in heads
        for dtype in DTYPES
    ]


@pytest.fixture(params=_cases())
def case(request):
    return _emitted(*request.param)


@pytest.fixture(params=_cases(heads=(True,)))
def head_case(request):
    return _emitted(*request.param)


@pytest.fixture(params=_cases(heads=(False,)))
def headless_case(request):
    return _emitted(*request.param)


# ----------------------------------------------------------------------------- every case


def test_passes_the_upstream_schema_of_its_layout(case):
    layout, with_head, _, files = case
    assert upstream_errors(layout, metadata(files)) == []
    if layout == "workflow" and with_head:
        # The only upstream definition of SpeculatorConfig is the flat layout's `speculative`.
        block = json.loads(files["config.json"])["speculator_config"]
        assert upstream_errors("flat", {"speculative": block}) == []


def test_is_rejected_by_the_other_layouts_upstream_schema(case):
    layout, _, _, files = case
    other = "flat" if layout == "workflow" else "workflow"
    assert upstream_errors(other, metadata(files)) != []


def test_passes_our_schemas(case):
    layout, with_head, _, files = case
    assert our_schema_errors(f"inference_metadata.{layout}.schema.json", metadata(files)) == []
    if "config.json" in files:
        assert our_schema_errors("speculator_config.schema.json", json.loads(files["config.json"])) == []


def test_artifacts_name_their_schemas(case):
    layout, with_head, ir, _ = case
    schemas = {a.relpath: a.schema for a in emit_inference_metadata(ir, None)}
    expected = {"inference_metadata.yaml": f"inference_metadata.{layout}.schema.json"}
    if layout == "workflow" and with_head:
        expected["config.json"] = "speculator_config.schema.json"
    assert schemas == expected


def test_sidecar_declaration_satisfies_the_runtime_rules(head_case):
    layout, _, ir, files = head_case
    doc = metadata(files)
    block = doc["speculative"] if layout == "flat" else json.loads(files["config.json"])["speculator_config"]
    assert speculator_findings(block, target_vocab_size=doc["model"].get("vocab_size")) == []
    assert contract_findings(block, ir.main.contract, ir.head(HeadContract.ONNX_GENAI).contract) == []


def test_state_ports_cover_the_main_contract(case):
    layout, _, ir, files = case
    doc = metadata(files)
    past = {t.name: t for t in ir.main.contract.inputs if t.name.startswith(("past.", "past_key_values."))}
    present = {t.name for t in ir.main.contract.outputs if t.name.startswith("present.")}
    if layout == "flat":
        io = doc["model"]["io"]
        pairs = list(zip(io["kv_inputs"], io["kv_outputs"])) + [(p["input"], p["output"]) for p in io["state_pairs"]]
        assert doc["kv_cache"]["native_dtype"] == ir.precision.io_dtype
    else:
        workflow = doc["pipeline"]["workflow"]
        aliases = [
            (cell, alias)
            for group in workflow["serving"]["state_service"]["groups"].values()
            for cell, alias in group["ports"]["decoder"].items()
        ]
        pairs = [(alias["input"], alias["output"]) for _, alias in aliases]
        for cell, alias in aliases:
            contract = workflow["state"][cell]["contract"]
            spec = past[alias["input"]]
            assert (contract["dtype"], contract["shape"], contract["rank"]) == (spec.dtype, list(spec.shape), len(spec.shape))
    assert sorted(i for i, _ in pairs) == sorted(past)
    assert sorted(o for _, o in pairs) == sorted(present)
    for i, o in pairs:  # each pair is one layer's past and present of one kind
        assert i.split(".")[-2:] == o.split(".")[-2:]


def test_no_head_leaves_no_trace_of_mtp(headless_case):
    _, _, _, files = headless_case
    assert set(files) == {"inference_metadata.yaml"}
    # The tool's own name in the header comment is not a trace of an MTP head.
    text = re.sub(r"\bmtpc\b", "", files["inference_metadata.yaml"].decode("utf-8").lower())
    for word in ("mtp", "specul", "sidecar", "draft", "rollback", "hidden"):
        assert word not in text


# ----------------------------------------------------------------------------- layout specifics


def test_flat_speculative_block_carries_every_field():
    arch = tiny_arch()
    doc = metadata(emit(build_ir("flat")))
    assert doc["speculative"] == {
        "proposal_type": "mtp",
        "model": SIDECAR,
        "num_speculative_tokens": NUM_SPECULATIVE_TOKENS,
        "mtp_hidden_output": "mtp_hidden",
        "target_hidden_output": "hidden_states",
        "target_hidden_size": arch.hidden_size,
        "target_hidden_layout": "BSH",
        "hc_mult": 1,
        "kv_mode": "proposal_local",
        "embedding": {"source": "target_initializer", "name": "model.embed_tokens.weight"},
        "lm_head": {"source": "target_initializer", "name": "lm_head.MatMul.weight"},
        "vocab_size": arch.vocab_size,
    }
    assert doc["model"]["vocab_size"] == arch.vocab_size
    assert doc["model"]["io"]["hidden_output"] == "hidden_states"


def test_workflow_declares_the_sidecar_in_config_json_only():
    files = emit(build_ir("workflow"))
    doc = metadata(files)
    assert "speculative" not in doc and "speculator_config" not in doc
    config = json.loads(files["config.json"])
    assert list(config) == ["speculator_config"]
    flat_block = metadata(emit(build_ir("flat")))["speculative"]
    assert config["speculator_config"] == flat_block  # one model, two places


def test_workflow_sidecar_component_is_not_a_second_decoder():
    """onnx-genai derives the decode ABI only when exactly one component qualifies as the decoder."""
    workflow = metadata(emit(build_ir("workflow")))["pipeline"]["workflow"]
    groups = workflow["serving"]["state_service"]["groups"].values()
    owners = {component for g in groups if g["kind"] != "recurrent" for component in g["ports"]}

    def is_decoder(name, component):
        roles = set(component["ports"]["roles"].values())
        return bool(roles & {"token_ids", "inputs_embeds"}) and ("logits" in roles or name in owners)

    assert [n for n, c in workflow["components"].items() if is_decoder(n, c)] == ["decoder"]
    assert workflow["components"]["decoder"]["implementation"]["artifact"] == "model.onnx"
    sidecar = workflow["components"]["mtp_sidecar"]
    assert sidecar["implementation"] == {"kind": "onnx", "artifact": SIDECAR}
    assert workflow["components"]["decoder"]["ports"]["roles"]["hidden_states"] == "hidden_states"


@pytest.mark.parametrize("with_head", [True, False])
def test_workflow_follows_validate_workflow_rules(with_head):
    """The document-semantics rules of §3.1 that a JSON Schema cannot express."""
    workflow = metadata(emit(build_ir("workflow", with_head=with_head)))["pipeline"]["workflow"]
    assert {"workflow_ssa", "typed_emit", "serving_service_contract"} <= set(workflow["manifest"]["capabilities"])
    inputs, state, serving = workflow["inputs"], workflow["state"], workflow["serving"]
    request_aligned = {"kind": "request_aligned", "axis": 0}
    for key, dtype in (("active", "bool"), ("done", "bool"), ("accepted_len", "int64")):
        contract = inputs[serving[key]]["contract"]
        assert contract["dtype"] == dtype and contract["batch_layout"] == request_aligned
    groups = serving["state_service"]["groups"]
    assert groups
    for cell_name, cell in state.items():
        assert cell["management"] == "runtime" and cell["release_boundary"]
        assert cell["contract"]["batch_layout"] == request_aligned
        assert cell["initializer"] in inputs
        assert cell_name in groups[cell["service_group"]]["ports"]["decoder"]
    for name, group in groups.items():
        if group["update"]["kind"] == "replace":
            assert "sequence_axis" not in group
        else:
            assert group["sequence_axis"] < min(state[c]["contract"]["rank"] for c in group["ports"]["decoder"])
        for cells in group["ports"].values():
            for cell_name, alias in cells.items():
                assert state[cell_name]["service_group"] == name and alias["output"]
            by_role: dict = {}
            for alias in cells.values():
                by_role.setdefault(alias.get("role"), []).append(alias["layer"])
            assert all(len(layers) == len(set(layers)) for layers in by_role.values())
            if group["kind"] != "recurrent":
                assert sorted(by_role["key"]) == sorted(by_role["value"])
        assert set(group["capabilities"].get("cascade", [])) == set(groups) - {name}
        rollback = group["capabilities"].get("rollback_positions")
        assert rollback == (1 + NUM_SPECULATIVE_TOKENS if with_head else None)
    invoke, emit_step = workflow["steps"]
    assert invoke["component"] in workflow["components"]
    assert set(invoke["inputs"].values()) <= set(inputs)
    assert emit_step["value"] in invoke["outputs"].values() and emit_step["output"] in workflow["outputs"]


def test_upstream_workflow_schema_refuses_the_flat_sidecar_block():
    """Why the workflow layout needs config.json: `speculative` there is a different, closed type."""
    files = emit(build_ir("workflow"))
    doc = metadata(files)
    doc["speculative"] = json.loads(files["config.json"])["speculator_config"]
    assert upstream_errors("workflow", doc) != []
    assert our_schema_errors("inference_metadata.workflow.schema.json", doc) != []


def test_sliding_window_layers_get_their_own_group():
    sliding = LayerKind.SLIDING_ATTENTION
    arch = replace(
        tiny_arch(),
        layer_kinds=(LayerKind.LINEAR_ATTENTION, sliding, LayerKind.LINEAR_ATTENTION, LayerKind.FULL_ATTENTION),
        sliding_window=128,
    )
    doc = metadata(emit(build_ir("workflow", arch=arch)))
    assert upstream_errors("workflow", doc) == []
    assert our_schema_errors("inference_metadata.workflow.schema.json", doc) == []
    assert doc["model"]["attention"]["sliding_window"] == 128
    group = doc["pipeline"]["workflow"]["serving"]["state_service"]["groups"]["sliding_attention"]
    assert group["kind"] == "sliding_attention" and group["reuse"] == {"evictable_prefix": True}
    assert {a["input"] for a in group["ports"]["decoder"].values()} == {"past_key_values.1.key", "past_key_values.1.value"}


def test_our_speculator_definitions_agree():
    from mtpc.schema.validation import load_schema

    flat = load_schema("inference_metadata.flat.schema.json")["$defs"]
    config = load_schema("speculator_config.schema.json")["$defs"]
    for name in ("SpeculatorConfig", "TargetInitializer"):
        assert flat[name] == config[name]


# ----------------------------------------------------------------------------- refusals


def test_no_onnx_genai_target_emits_nothing():
    assert emit(build_ir(targets=Targets())) == {}


def test_a_quantized_lm_head_is_borrowed_under_the_same_name():
    # The packed LM head keeps the float one's initializer name (its scales sit beside it under
    # onnx-genai's names), so the declaration does not depend on the LM head's quantization.
    plan = QuantizationPlan(default=QuantScheme(bits=4), overrides=(QuantOverride("mtp.*", QuantScheme()),))
    float_lm_head = replace(plan, overrides=(QuantOverride("lm_head.weight", QuantScheme()),))
    speculators = [json.loads(emit(build_ir(quantization=p))["config.json"]) for p in (plan, float_lm_head)]
    assert speculators[0] == speculators[1]
    assert speculators[0]["speculator_config"]["lm_head"] == {"source": "target_initializer", "name": "lm_head.MatMul.weight"}


# Lowering and the spec rules refuse these states as user errors; reaching the emitter with one is a bug.


def test_unknown_layout_is_asserted_against():
    with pytest.raises(AssertionError, match="layout"):
        emit(build_ir(targets=Targets(onnx_genai=OnnxGenaiTarget(layout="nested"))))


def test_paged_main_decoder_is_asserted_against():
    ir = build_ir()
    with pytest.raises(AssertionError, match="dense"):
        emit(replace(ir, main=replace(ir.main, attention=AttentionMode.PAGED)))


def test_missing_head_decoder_is_an_internal_error():
    with pytest.raises(MtpcError) as err:
        emit(build_ir(heads=()))
    assert err.value.exit_code is ExitCode.INTERNAL


# ----------------------------------------------------------------------------- the rules themselves

VALID_BLOCK = {  # §4.6 of the reference
    "proposal_type": "mtp",
    "model": "mtp/model.onnx",
    "num_speculative_tokens": 3,
    "target_hidden_output": "hidden_states.63",
    "target_hidden_layout": "BSH",
    "target_hidden_size": 5120,
    "hc_mult": 1,
    "mtp_hidden_output": "mtp_hidden",
    "kv_mode": "proposal_local",
    "embedding": {"source": "target_initializer", "name": "model.embed_tokens.weight"},
    "lm_head": {"source": "target_initializer", "name": "lm_head.weight"},
}


def _changed(**changes):
    block = {k: v for k, v in VALID_BLOCK.items() if changes.get(k, 0) is not None}
    block.update({k: v for k, v in changes.items() if v is not None})
    return block


# Rows of §4.7 (None removes the key) and the message onnx-genai gives, or a fragment of ours.
INVALID_BLOCKS = [
    ("1-hidden_threaded", _changed(kv_mode="hidden_threaded"), "`kv_mode` must be one of"),
    ("2-bsh-hc2", _changed(hc_mult=2, mtp_state_output="mtp_state"), "MTP BSH target_hidden_layout requires hc_mult == 1"),
    ("3-no-hc_mult", _changed(hc_mult=None), "mtp metadata is missing `hc_mult`"),
    ("4-string-embedding", _changed(embedding="model.embed_tokens.weight"), "`embedding` must be {source"),
    ("5-file-source", _changed(embedding={"source": "file", "name": "embedding.f32"}), "`embedding.source` must be"),
    ("6-bshc-no-state", _changed(target_hidden_layout="BSHC", hc_mult=4), "MTP hc_mult > 1 requires mtp_state_output"),
    ("7-zero-tokens", _changed(num_speculative_tokens=0), "mtp metadata `num_speculative_tokens` must be greater than zero"),
    ("8-empty-lm_head", _changed(lm_head={"source": "target_initializer", "name": ""}), "mtp metadata `lm_head.name` must not be empty"),
    ("9-no-model", _changed(model=None), "mtp metadata is missing `model`"),
    ("10-implicit-layout", _changed(target_hidden_layout=None), "`target_hidden_layout` must be explicit"),
    ("11-accepted_prefix", _changed(kv_mode="accepted_prefix"), "MTP kv_mode accepted_prefix is declared but not executable"),
    ("12-lowercase-bsh", _changed(target_hidden_layout="bsh"), "`target_hidden_layout` must be one of"),
    ("13-empty-state", _changed(mtp_state_output=""), "MTP mtp_state_output must not be empty when provided"),
    ("14-zero-width", _changed(target_hidden_size=0), "mtp metadata is missing `target_hidden_size`"),
    ("15-old-names", {**_changed(model=None), "model_path": "mtp/model.onnx"}, "mtp metadata is missing `model`"),
    ("proposal-type", _changed(proposal_type="eagle"), "`proposal_type` must be `mtp`"),
]


def test_reference_example_passes():
    assert speculator_findings(VALID_BLOCK, target_vocab_size=248320) == []
    assert speculator_findings({**VALID_BLOCK, "proposal_type": "MTP"}, target_vocab_size=248320) == []


@pytest.mark.parametrize("block, message", [c[1:] for c in INVALID_BLOCKS], ids=[c[0] for c in INVALID_BLOCKS])
def test_reference_counterexamples_are_refused(block, message):
    findings = speculator_findings(block, target_vocab_size=248320)
    assert any(message in f for f in findings), findings


def test_undeclared_target_vocabulary_is_refused():
    assert speculator_findings(VALID_BLOCK, target_vocab_size=None) == [
        "native MTP speculation requires the target vocabulary size; declare `model.vocab_size` in the package metadata"
    ]


def test_contract_findings_catch_graph_mismatches():
    ir = build_ir()
    head = ir.head(HeadContract.ONNX_GENAI).contract
    block = json.loads(emit(ir)["config.json"])["speculator_config"]

    def findings(head_contract=head, **changes):
        return " | ".join(contract_findings({**block, **changes}, ir.main.contract, head_contract))

    assert findings() == ""
    assert "must expose hidden-state output 'seed'" in findings(target_hidden_output="seed")
    assert "does not match configured target hidden size 32" in findings(target_hidden_size=32)
    assert "no tensor named 'mtp_out'" in findings(mtp_hidden_output="mtp_out")
    float16_head = build_ir(io_dtype="float16").head(HeadContract.ONNX_GENAI).contract
    assert "share one float dtype" in findings(float16_head)


# ----------------------------------------------------------------------------- determinism

_DIGEST_SCRIPT = """
import hashlib
from tests.emit.test_inference_metadata import build_ir, emit
for layout in ("workflow", "flat"):
    for with_head in (True, False):
        for path, data in sorted(emit(build_ir(layout, with_head=with_head)).items()):
            print(layout, with_head, path, hashlib.sha256(data).hexdigest())
"""


def test_bytes_do_not_depend_on_the_hash_seed():
    outputs = set()
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        outputs.add(run.stdout)
    assert len(outputs) == 1
    here = "".join(
        f"{layout} {with_head} {path} {hashlib.sha256(data).hexdigest()}\n"
        for layout in LAYOUTS
        for with_head in (True, False)
        for path, data in sorted(emit(build_ir(layout, with_head=with_head)).items())
    )
    assert outputs == {here}
