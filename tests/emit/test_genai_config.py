"""genai_config.json (and the head folder's) against the real onnxruntime-genai 0.18.0 parser.

`og.Config(dir)` parses a config without loading graphs, so every emitted config is
loaded for real; expected names come from configs the 0.18.0 builder wrote
(../shared/reference/builder-configs) and from the runtime reference, not from the emitter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import onnxruntime_genai as og
import pytest

from mtpc.emit import EMITTERS
from mtpc.emit.artifact import EmitContext
from mtpc.graphs.initializers import StoredTensor
from mtpc.emit.genai_config import emit_genai_config
from mtpc.ir import HeadPolicy
from mtpc.sources.info import SourceInfo
from mtpc.schema.validation import errors as schema_errors

from tests.fixtures.arch import tiny_arch
from tests.fixtures.shared import builder_config
from tests.passes.ir_factory import CPU_DENSE, CUDA_DENSE, CUDA_PAGED, compiled

TARGETS = {"cpu-dense": CPU_DENSE, "cuda-dense": CUDA_DENSE, "cuda-paged": CUDA_PAGED}
REPO = Path(__file__).parents[2]


def _builder(name: str) -> dict:
    return json.loads(builder_config(name).read_text(encoding="utf-8"))


def _emit(ir, data_layouts=None):
    ctx = EmitContext(SourceInfo(ir.architecture), weights_factory=lambda: None, data_layouts=data_layouts or {})
    return {a.relpath: a for a in emit_genai_config(ir, ctx)}


def _write(tmp_path: Path, artifacts) -> None:
    for art in artifacts.values():
        path = tmp_path / art.relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(art.read())


def _doc(art) -> dict:
    return json.loads(art.read().decode("utf-8"))


@pytest.fixture(scope="module", params=sorted(TARGETS))
def target_name(request):
    return request.param


@pytest.fixture(scope="module", params=[True, False], ids=["head", "no-head"])
def with_head(request):
    return request.param


@pytest.fixture(scope="module")
def emitted(target_name, with_head):
    ir = compiled(ort=TARGETS[target_name], arch=tiny_arch(mtp_num_layers=int(with_head)))
    return ir, _emit(ir)


def test_listed_among_the_emitters():
    assert dict(EMITTERS)["genai_config"] is emit_genai_config


def test_artifacts_and_schema_id(emitted, with_head):
    _, artifacts = emitted
    expected = ["genai_config.json", "mtp/genai_config.json"] if with_head else ["genai_config.json"]
    assert sorted(artifacts) == expected
    assert all(a.schema == "genai_config" for a in artifacts.values())


def test_the_real_parser_loads_every_config(emitted, tmp_path):
    _, artifacts = emitted
    _write(tmp_path, artifacts)
    for relpath in artifacts:
        og.Config(str((tmp_path / relpath).parent))


def test_every_config_satisfies_our_schema(emitted):
    for art in emitted[1].values():
        assert [e.message for e in schema_errors("genai_config", _doc(art))] == []


def test_bytes_are_strict_json_with_a_trailing_newline(emitted):
    for art in emitted[1].values():
        data = art.read()
        assert data.endswith(b"}\n") and not data.startswith(b"\xef\xbb\xbf")
        assert b"\\u" not in data and b"NaN" not in data


def test_emitting_twice_gives_the_same_bytes(emitted):
    ir, artifacts = emitted
    again = _emit(ir)
    assert {k: a.read() for k, a in again.items()} == {k: a.read() for k, a in artifacts.items()}


def test_model_scalars(emitted):
    model = _doc(emitted[1]["genai_config.json"])["model"]
    # tiny_arch: vocab 256, context 512, bos 1, eos 2, pad 0.
    assert {k: model[k] for k in ("type", "vocab_size", "context_length", "bos_token_id", "eos_token_id", "pad_token_id")} == {
        "type": "qwen3_5_text", "vocab_size": 256, "context_length": 512, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    }
    decoder = model["decoder"]
    assert (decoder["filename"], decoder["num_hidden_layers"], decoder["hidden_size"]) == ("model.onnx", 4, 64)
    assert (decoder["num_attention_heads"], decoder["num_key_value_heads"], decoder["head_size"]) == (4, 2, 64)


def test_decoder_names_match_the_builder(emitted, target_name, with_head):
    decoder = _doc(emitted[1]["genai_config.json"])["model"]["decoder"]
    # A paged target with a head captures compact state updates: the builder's dense_su export names them.
    builder = "dense_cpu" if target_name != "cuda-paged" else "dense_su" if with_head else "dense_paged"
    reference = _builder(builder)["model"]["decoder"]
    assert decoder["inputs"] == reference["inputs"]
    expected_outputs = dict(reference["outputs"])
    if not with_head:
        del expected_outputs["hidden_states"]
    assert decoder["outputs"] == expected_outputs


def test_execution_provider(emitted, target_name):
    options = _doc(emitted[1]["genai_config.json"])["model"]["decoder"]["session_options"]
    expected = [] if target_name == "cpu-dense" else [{"cuda": {}}]
    assert options["provider_options"] == expected


def test_search_settings(emitted, target_name):
    search = _doc(emitted[1]["genai_config.json"])["search"]
    assert search == {
        "max_length": 512,
        "do_sample": False,
        "past_present_share_buffer": target_name == "cuda-paged",
    }


def test_mtp_section(emitted, target_name, with_head):
    doc = _doc(emitted[1]["genai_config.json"])
    if not with_head:
        assert "mtp" not in doc["model"] and "speculative" not in doc
        return
    mtp = doc["model"]["mtp"]
    reference = _builder("dense_paged" if target_name == "cuda-paged" else "dense_cpu")["model"]["mtp"]
    assert mtp["filename"] == "mtp/mtp.onnx"
    assert (mtp["enabled"], mtp["num_hidden_layers"], mtp["num_key_value_heads"], mtp["head_size"]) == (True, 1, 2, 64)
    assert mtp["main_hidden_states"] == reference["main_hidden_states"] == doc["model"]["decoder"]["outputs"]["hidden_states"]
    expected_inputs = dict(reference["inputs"])
    if target_name == "cuda-paged":
        del expected_inputs["attention_mask"]  # a paged head has none (the runtime ignores this key anyway)
    assert mtp["inputs"] == expected_inputs
    assert mtp["outputs"] == reference["outputs"]
    assert mtp["inputs"]["hidden_states"] != mtp["outputs"]["hidden_states"]
    assert doc["speculative"] == {"max_draft_tokens": 2}  # the default
    assert "shared_initializers" not in mtp  # no data-layout fact given


def test_head_folder_config_has_the_head_as_decoder(emitted, target_name, with_head):
    if not with_head:
        return
    main = _doc(emitted[1]["genai_config.json"])
    head = _doc(emitted[1]["mtp/genai_config.json"])
    decoder = head["model"]["decoder"]
    assert decoder["filename"] == "mtp.onnx"
    assert (decoder["num_hidden_layers"], decoder["num_key_value_heads"], decoder["head_size"]) == (1, 2, 64)
    assert decoder["hidden_size"] == main["model"]["decoder"]["hidden_size"]
    mtp = main["model"]["mtp"]
    assert {k: v for k, v in decoder["inputs"].items() if k in mtp["inputs"]} == mtp["inputs"]
    assert decoder["outputs"] == mtp["outputs"]
    assert decoder["session_options"] == main["model"]["decoder"]["session_options"]
    assert "mtp" not in head["model"] and "state_groups" not in decoder
    for key in ("type", "vocab_size", "context_length", "bos_token_id", "eos_token_id", "pad_token_id"):
        assert head["model"][key] == main["model"][key]
    assert head["search"] == main["search"]
    if target_name == "cuda-paged":
        # The head reads the target's block table and has no attention mask.
        for role in ("block_table", "cumulative_sequence_lengths", "past_sequence_lengths", "attention_metadata"):
            assert decoder["inputs"][role] == main["model"]["decoder"]["inputs"][role]
        assert "attention_mask" not in decoder["inputs"]
        assert head["engine"] == main["engine"]
    else:
        assert decoder["inputs"]["attention_mask"] == "attention_mask"


def test_paged_state_groups_and_engine(emitted, target_name, with_head):
    doc = _doc(emitted[1]["genai_config.json"])
    if target_name != "cuda-paged":
        assert "engine" not in doc and "state_groups" not in doc["model"]["decoder"]
        return
    # tiny_arch alternates linear (0, 2) and full attention (1, 3).
    # With a head the fixed groups declare compact state updates for max_draft_tokens (2, the default) tokens, as the
    # builder's dense_su export does; the paged engine drafts no more than that on a hybrid model.
    updates = {"capacity": 2} if with_head else None
    groups = [
        {"kind": "paged_kv", "layer_ids": [1, 3]},
        {"kind": "fixed_conv", "layer_ids": [0, 2]} | ({"state_update": updates} if with_head else {}),
        {"kind": "fixed_recurrent", "layer_ids": [0, 2]}
        | ({"state_update": updates | {"key_head_count": 2}} if with_head else {}),
    ]
    assert doc["model"]["decoder"]["state_groups"] == groups
    assert doc["model"]["decoder"].get("state_update_capacity") == (2 if with_head else None)
    expected = {"block_size": 16, "max_batch_size": 8, "gpu_utilization_factor": 0.6}
    if with_head:
        expected["prefix_caching"] = False
    assert doc["engine"] == {"dynamic_batching": expected}


def test_no_head_leaves_no_trace_of_mtp():
    ir = compiled(ort=CUDA_PAGED, arch=tiny_arch(mtp_num_layers=1), head=HeadPolicy.OFF)
    artifacts = _emit(ir, {"model.onnx.data": {"model.embed_tokens.weight": StoredTensor(0, 32768, 10, (256, 64))}})
    assert list(artifacts) == ["genai_config.json"]
    data = artifacts["genai_config.json"].read()
    for word in (b"mtp", b"hidden_states", b"speculative", b"shared_initializers", b"prefix_caching"):
        assert word not in data


def test_num_blocks_replaces_the_utilization_factor(tmp_path):
    ir = compiled(ort=replace(CUDA_PAGED, num_blocks=64))
    artifacts = _emit(ir)
    assert _doc(artifacts["genai_config.json"])["engine"]["dynamic_batching"] == {
        "block_size": 16, "max_batch_size": 8, "num_blocks": 64, "prefix_caching": False,
    }
    _write(tmp_path, artifacts)
    og.Config(str(tmp_path))


def test_no_onnxruntime_genai_target_no_config():
    assert _emit(compiled(ort=None)) == {}


# ----------------------------------------------------------------------------- shared initializers

# What the graph emitter records per data file: its shareable tensors (the embedding, with its quantized
# parts, and the LM head, whose packed data keeps its name and whose scales are `lm_head.MatMul.scales`), by name.
MAIN_LAYOUT = {
    "lm_head.MatMul.scales": StoredTensor(48192, 1024, 10, (256, 2)),
    "model.embed_tokens.weight_Q4": StoredTensor(0, 8192, 2, (256, 2, 16)),
    "lm_head.MatMul.weight": StoredTensor(40192, 8000, 2, (256, 2, 16)),
    "model.embed_tokens.weight_scales": StoredTensor(49216, 512, 10, (256, 2)),
}
HEAD_LAYOUT = {  # the same tensors at other offsets of the head's own file
    "model.embed_tokens.weight_Q4": StoredTensor(4096, 8192, 2, (256, 2, 16)),
    "model.embed_tokens.weight_scales": StoredTensor(0, 512, 10, (256, 2)),
    "lm_head.MatMul.weight": StoredTensor(36864, 8000, 2, (256, 2, 16)),
    "lm_head.MatMul.scales": StoredTensor(44864, 1024, 10, (256, 2)),
}
DATA_LAYOUT = {"model.onnx.data": MAIN_LAYOUT, "mtp/mtp.onnx.data": HEAD_LAYOUT}
EXPECTED_SHARED = [
    {"name": "model.embed_tokens.weight_Q4", "data_file": "model.onnx.data", "offset": "0", "length": "8192", "data_type": 2, "shape": [256, 2, 16]},
    {"name": "lm_head.MatMul.weight", "data_file": "model.onnx.data", "offset": "40192", "length": "8000", "data_type": 2, "shape": [256, 2, 16]},
    {"name": "lm_head.MatMul.scales", "data_file": "model.onnx.data", "offset": "48192", "length": "1024", "data_type": 10, "shape": [256, 2]},
    {"name": "model.embed_tokens.weight_scales", "data_file": "model.onnx.data", "offset": "49216", "length": "512", "data_type": 10, "shape": [256, 2]},
]


@pytest.mark.parametrize("target", [CUDA_DENSE, CUDA_PAGED], ids=["cuda-dense", "cuda-paged"])
def test_shared_initializers_on_cuda(tmp_path, target):
    artifacts = _emit(compiled(ort=target), DATA_LAYOUT)
    main = _doc(artifacts["genai_config.json"])["model"]
    assert main["decoder"]["shared_initializers"] == EXPECTED_SHARED
    assert main["mtp"]["shared_initializers"] == EXPECTED_SHARED
    # The head folder points at the main model's data file, one level up.
    head = _doc(artifacts["mtp/genai_config.json"])["model"]["decoder"]
    assert head["shared_initializers"] == [dict(e, data_file="../model.onnx.data") for e in EXPECTED_SHARED]
    _write(tmp_path, artifacts)
    og.Config(str(tmp_path))
    og.Config(str(tmp_path / "mtp"))
    for art in artifacts.values():
        assert schema_errors("genai_config", _doc(art)) == []


def test_no_shared_initializers_on_cpu():
    # og.Model on the CPU EP fails with "GetMemoryInfo for CPU should not be used." when they are listed.
    artifacts = _emit(compiled(ort=CPU_DENSE), DATA_LAYOUT)
    for art in artifacts.values():
        assert b"shared_initializers" not in art.read()


@pytest.mark.parametrize(
    "layouts",
    [{}, {"model.onnx.data": MAIN_LAYOUT}, {"mtp/mtp.onnx.data": HEAD_LAYOUT}, {"other.onnx.data": MAIN_LAYOUT}],
    ids=["none", "main-only", "head-only", "other-file"],
)
def test_no_shared_initializers_without_both_layouts(layouts):
    artifacts = _emit(compiled(ort=CUDA_DENSE), layouts)
    for art in artifacts.values():
        assert b"shared_initializers" not in art.read()


def test_a_differently_quantized_head_lm_head_is_not_shared():
    head = dict(HEAD_LAYOUT)
    head["lm_head.MatMul.weight"] = StoredTensor(36864, 16384, 3, (256, 2, 32))  # int8 in the head
    # Its scales happen to have the same dtype, shape and length; they still hold other values.
    artifacts = _emit(compiled(ort=CUDA_DENSE), {"model.onnx.data": MAIN_LAYOUT, "mtp/mtp.onnx.data": head})
    shared = _doc(artifacts["genai_config.json"])["model"]["mtp"]["shared_initializers"]
    assert [e["name"] for e in shared] == ["model.embed_tokens.weight_Q4", "model.embed_tokens.weight_scales"]


def test_a_part_missing_from_the_head_blocks_sharing_of_that_weight():
    head = {k: v for k, v in HEAD_LAYOUT.items() if k != "model.embed_tokens.weight_scales"}
    artifacts = _emit(compiled(ort=CUDA_DENSE), {"model.onnx.data": MAIN_LAYOUT, "mtp/mtp.onnx.data": head})
    shared = _doc(artifacts["genai_config.json"])["model"]["mtp"]["shared_initializers"]
    assert [e["name"] for e in shared] == ["lm_head.MatMul.weight", "lm_head.MatMul.scales"]


# ----------------------------------------------------------------------------- determinism

_DIGEST_SCRIPT = """
import hashlib
from dataclasses import replace
from mtpc.ir import AttentionMode
from tests.passes.ir_factory import CUDA_PAGED, compiled
from tests.emit.test_genai_config import DATA_LAYOUT, _emit
for target in (CUDA_PAGED, replace(CUDA_PAGED, attention=AttentionMode.DENSE)):
    for art in sorted(_emit(compiled(ort=target), DATA_LAYOUT).values(), key=lambda a: a.relpath):
        print(art.relpath, hashlib.sha256(art.read()).hexdigest())
"""


def test_bytes_do_not_depend_on_the_hash_seed():
    digests = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, check=True)
        digests.add(run.stdout)
    assert len(digests) == 1 and digests.pop().count("\n") == 4
