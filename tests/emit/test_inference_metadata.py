"""onnx-genai metadata (the flat layout Engine::from_dir loads), with and without an MTP head, against
the upstream schemas and rules.

Expected values come from the upstream schemas in shared/conformance/onnx-genai/, the rule
tables of shared/reference/inference-metadata.md, and the fixture architecture itself; whole
compiled packages go through onnx-genai's own checker in tests/checks/test_onnx_genai_mutants.py
and everywhere a test writes one (tests/clients/onnx_genai.py).
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
from mtpc.profiles.onnx_genai import PROFILE
from mtpc.schema.validation import errors as our_schema_errors
from tests.fixtures.arch import tiny_arch
from tests.fixtures.shared import shared_file

REPO = Path(__file__).resolve().parents[2]
SIDECAR = "mtp_sidecar/mtp_sidecar.onnx"
NUM_SPECULATIVE_TOKENS = 2
DTYPES = ("float32", "float16")
# The schema generated from onnx-genai's own types at the profile's commit (ac9c7dd). Its file is named
# for the workflow layout it introduced, but it is the whole metadata type of that commit: a package
# without a pipeline is valid against it too.
AT_COMMIT = "workflow"
# The flat-layout schema of the commit before (5a12882): open root, and the only upstream definition
# of SpeculatorConfig.
BEFORE = "flat"


def build_ir(layout: str = "flat", *, with_head: bool = True, io_dtype: str = "float32", arch=None, **changes) -> ModelIR:
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


def speculator_block(files: dict[str, bytes]) -> dict:
    return json.loads(files["config.json"])["speculator_config"]


@lru_cache(maxsize=None)
def _emitted(with_head: bool, dtype: str):
    ir = build_ir(with_head=with_head, io_dtype=dtype)
    return with_head, ir, emit(ir)


def _cases(heads=(True, False)):
    return [
        pytest.param((head, dtype), id=f"{'head' if head else 'nohead'}-{dtype}")
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


def test_passes_the_upstream_schemas(case):
    with_head, _, files = case
    assert upstream_errors(AT_COMMIT, metadata(files)) == []
    assert upstream_errors(BEFORE, metadata(files)) == []
    if with_head:
        assert upstream_errors(BEFORE, {"speculative": speculator_block(files)}) == []


def test_passes_our_schemas(case):
    _, _, files = case
    assert our_schema_errors("inference_metadata.flat.schema.json", metadata(files)) == []
    if "config.json" in files:
        assert our_schema_errors("speculator_config.schema.json", json.loads(files["config.json"])) == []


def test_artifacts_name_their_schemas(case):
    with_head, ir, _ = case
    schemas = {a.relpath: a.schema for a in emit_inference_metadata(ir, None)}
    expected = {"inference_metadata.yaml": "inference_metadata.flat.schema.json"}
    if with_head:
        expected["config.json"] = "speculator_config.schema.json"
    assert schemas == expected


def test_stays_on_the_engine_from_dir_route(case):
    """What onnx-genai's Engine::from_dir admits at the profile's commit (mtpc.profiles.onnx_genai)."""
    _, _, files = case
    doc = metadata(files)
    assert "pipeline" not in doc  # a pipeline sends the package to the loader that never reads config.json
    for refused in ("kv_cache", "speculative", "speculator_config"):
        assert refused not in doc
    assert "kv_update" not in doc["model"]["io"]
    assert set(doc["required_capabilities"]) <= set(PROFILE.runtime_capabilities)
    assert doc["model"]["vocab_size"] == tiny_arch().vocab_size  # native MTP reads it


def test_sidecar_declaration_satisfies_the_runtime_rules(head_case):
    _, ir, files = head_case
    doc = metadata(files)
    block = speculator_block(files)
    assert speculator_findings(block, target_vocab_size=doc["model"].get("vocab_size")) == []
    assert contract_findings(block, ir.main.contract, ir.head(HeadContract.ONNX_GENAI).contract) == []


def test_state_ports_cover_the_main_contract(case):
    _, ir, files = case
    io = metadata(files)["model"]["io"]
    past = {t.name for t in ir.main.contract.inputs if t.name.startswith(("past.", "past_key_values."))}
    present = {t.name for t in ir.main.contract.outputs if t.name.startswith("present.")}
    pairs = list(zip(io["kv_inputs"], io["kv_outputs"])) + [(p["input"], p["output"]) for p in io["state_pairs"]]
    assert sorted(i for i, _ in pairs) == sorted(past)
    assert sorted(o for _, o in pairs) == sorted(present)
    for i, o in pairs:  # each pair is one layer's past and present of one kind
        assert i.split(".")[-2:] == o.split(".")[-2:]


def test_no_head_leaves_no_trace_of_mtp(headless_case):
    _, _, files = headless_case
    assert set(files) == {"inference_metadata.yaml"}
    # The tool's own name in the header comment is not a trace of an MTP head.
    text = re.sub(r"\bmtpc\b", "", files["inference_metadata.yaml"].decode("utf-8").lower())
    for word in ("mtp", "specul", "sidecar", "draft", "rollback", "hidden"):
        assert word not in text


# ----------------------------------------------------------------------------- the layout's specifics


def test_speculator_config_carries_every_field():
    arch = tiny_arch()
    files = emit(build_ir())
    assert list(json.loads(files["config.json"])) == ["speculator_config"]
    assert speculator_block(files) == {
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
    doc = metadata(files)
    assert doc["model"]["vocab_size"] == arch.vocab_size
    assert doc["model"]["io"]["hidden_output"] == "hidden_states"


def test_the_sidecar_is_a_plain_path_into_its_own_folder():
    """onnx-genai takes the root's only .onnx as the target and joins `model` to the root unchecked."""
    model = speculator_block(emit(build_ir()))["model"]
    folder, name = model.split("/")
    assert folder == PROFILE.sidecar_folder and name.endswith(".onnx") and ".." not in model


def test_capabilities_follow_the_attention():
    grouped = metadata(emit(build_ir()))
    assert grouped["required_capabilities"] == ["kv_cache", "grouped_query_attention"]
    arch = tiny_arch()
    mha = replace(arch, num_key_value_heads=arch.num_attention_heads)
    doc = metadata(emit(build_ir(with_head=False, arch=mha)))
    assert doc["required_capabilities"] == ["kv_cache", "multi_head_attention"]
    assert doc["model"]["attention"]["type"] == "multi_head_attention"
    assert upstream_errors(AT_COMMIT, doc) == []


def test_what_the_flat_layout_carried_before_the_commit_is_refused_by_its_schema():
    """kv_cache, model.io.kv_update and a SpeculatorConfig `speculative` were the flat layout of 5a12882;
    the commit's own schema refuses each (and its crate with it: the mutants test), ours too."""
    files = emit(build_ir())
    for edit in (
        lambda doc: doc.update(kv_cache={"native_dtype": "float32"}),
        lambda doc: doc["model"]["io"].update(kv_update="append"),
        lambda doc: doc.update(speculative=speculator_block(files)),
    ):
        doc = metadata(files)
        edit(doc)
        assert upstream_errors(BEFORE, doc) == []
        assert upstream_errors(AT_COMMIT, doc) != []
        assert our_schema_errors("inference_metadata.flat.schema.json", doc) != []


def test_sliding_window_layers_are_kv_pairs_with_their_window():
    sliding = LayerKind.SLIDING_ATTENTION
    arch = replace(
        tiny_arch(),
        layer_kinds=(LayerKind.LINEAR_ATTENTION, sliding, LayerKind.LINEAR_ATTENTION, LayerKind.FULL_ATTENTION),
        sliding_window=128,
    )
    doc = metadata(emit(build_ir(arch=arch)))
    assert upstream_errors(AT_COMMIT, doc) == []
    assert our_schema_errors("inference_metadata.flat.schema.json", doc) == []
    assert doc["model"]["attention"]["sliding_window"] == 128
    assert {"past_key_values.1.key", "past_key_values.1.value"} <= set(doc["model"]["io"]["kv_inputs"])


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


@pytest.mark.parametrize("layout", ["workflow", "nested"])
def test_a_layout_other_than_flat_is_asserted_against(layout):
    with pytest.raises(AssertionError, match="layout"):
        emit(build_ir(targets=Targets(onnx_genai=OnnxGenaiTarget(layout=layout))))


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


# Rows of §4.7 (None removes the key): the message onnx-genai gives (or a fragment of ours), the field
# a check reports it at, and whether onnx-genai drops the whole block (it does not deserialize).
INVALID_BLOCKS = [
    ("1-hidden_threaded", _changed(kv_mode="hidden_threaded"), "`kv_mode` must be one of", ("kv_mode",), True),
    ("2-bsh-hc2", _changed(hc_mult=2, mtp_state_output="mtp_state"), "MTP BSH target_hidden_layout requires hc_mult == 1", ("hc_mult",), False),
    ("3-no-hc_mult", _changed(hc_mult=None), "mtp metadata is missing `hc_mult`", ("hc_mult",), False),
    ("4-string-embedding", _changed(embedding="model.embed_tokens.weight"), "`embedding` must be {source", ("embedding",), True),
    ("5-file-source", _changed(embedding={"source": "file", "name": "embedding.f32"}), "`embedding.source` must be",
     ("embedding", "source"), True),
    ("6-bshc-no-state", _changed(target_hidden_layout="BSHC", hc_mult=4), "MTP hc_mult > 1 requires mtp_state_output", ("hc_mult",), False),
    ("7-zero-tokens", _changed(num_speculative_tokens=0), "mtp metadata `num_speculative_tokens` must be greater than zero",
     ("num_speculative_tokens",), False),
    ("8-empty-lm_head", _changed(lm_head={"source": "target_initializer", "name": ""}), "mtp metadata `lm_head.name` must not be empty",
     ("lm_head", "name"), False),
    ("9-no-model", _changed(model=None), "mtp metadata is missing `model`", ("model",), False),
    ("10-implicit-layout", _changed(target_hidden_layout=None), "`target_hidden_layout` must be explicit", ("target_hidden_layout",), False),
    ("11-accepted_prefix", _changed(kv_mode="accepted_prefix"), "MTP kv_mode accepted_prefix is declared but not executable",
     ("kv_mode",), False),
    ("12-lowercase-bsh", _changed(target_hidden_layout="bsh"), "`target_hidden_layout` must be one of", ("target_hidden_layout",), True),
    ("13-empty-state", _changed(mtp_state_output=""), "MTP mtp_state_output must not be empty when provided", ("mtp_state_output",), False),
    ("14-zero-width", _changed(target_hidden_size=0), "mtp metadata is missing `target_hidden_size`", ("target_hidden_size",), False),
    ("15-old-names", {**_changed(model=None), "model_path": "mtp/model.onnx"}, "mtp metadata is missing `model`", ("model",), False),
    ("proposal-type", _changed(proposal_type="eagle"), "`proposal_type` must be `mtp`", ("proposal_type",), False),
    ("string-count", _changed(hc_mult="1"), "`hc_mult` must be an integer", ("hc_mult",), True),
    ("null-tokens", _changed(num_speculative_tokens=None) | {"num_speculative_tokens": None}, "`num_speculative_tokens` must be",
     ("num_speculative_tokens",), True),
]


def test_reference_example_passes():
    assert speculator_findings(VALID_BLOCK, target_vocab_size=248320) == []
    assert speculator_findings({**VALID_BLOCK, "proposal_type": "MTP"}, target_vocab_size=248320) == []
    # serde reads an explicit null as an absent key: the defaults apply.
    assert speculator_findings({**VALID_BLOCK, "mtp_state_output": None, "kv_mode": None}, target_vocab_size=248320) == []


@pytest.mark.parametrize("block, message, field, dropped", [c[1:] for c in INVALID_BLOCKS], ids=[c[0] for c in INVALID_BLOCKS])
def test_reference_counterexamples_are_refused_at_their_field(block, message, field, dropped):
    findings = [f for f in speculator_findings(block, target_vocab_size=248320) if message in f.message]
    assert findings, speculator_findings(block, target_vocab_size=248320)
    assert (findings[0].field, findings[0].dropped, findings[0].in_metadata) == (field, dropped, False)


def test_undeclared_target_vocabulary_is_refused_in_the_metadata():
    (finding,) = speculator_findings(VALID_BLOCK, target_vocab_size=None)
    assert finding.message == (
        "native MTP speculation requires the target vocabulary size; declare `model.vocab_size` in the package metadata"
    )
    assert (finding.field, finding.in_metadata) == (("model", "vocab_size"), True)


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
for with_head in (True, False):
    for path, data in sorted(emit(build_ir(with_head=with_head)).items()):
        print(with_head, path, hashlib.sha256(data).hexdigest())
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
        f"{with_head} {path} {hashlib.sha256(data).hexdigest()}\n"
        for with_head in (True, False)
        for path, data in sorted(emit(build_ir(with_head=with_head)).items())
    )
    assert outputs == {here}
