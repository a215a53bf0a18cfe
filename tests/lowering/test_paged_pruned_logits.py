"""The pruned LM head of a paged package: logits rows follow `logits_indices`, hidden rows the token count.

onnxruntime-genai 0.18.0's engine (VarlenDecoderIO::PrepareLogitsIndices / GetSelectedLogitsIndices)
feeds, per sequence in packed order, the rows of the drafts it verifies and then the sequence's last
row, and binds `hidden_states` with one row per packed token (PrepareHiddenStates), which is what the
MTP head reads. So the number of logits rows and of hidden-state rows differ on every step with more
than one token in some sequence.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime_genai as og
import pytest

from mtpc.pipeline.driver import build
from mtpc.ir import HeadContract
from mtpc.output.write import write_package
from mtpc.passes.paged_io import with_selected_logits
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.arch import tiny_arch
from tests.graphs.tiny import ORT_HEAD_FILE, emit, make_ir, presents_as_past

from .paged_runner import BlockPool, PagedRunner, lowered_session, rows_of

SPEC = Path(__file__).resolve().parents[1] / "cases" / "valid" / "paged_pruned_logits.yaml"
PROMPTS = [[3, 17, 42, 9, 250], [7, 128, 64], [11, 5, 200, 31, 8, 99, 2]]
VERIFY = [[13, 60, 61], [40], [77, 30, 31, 32]]  # a verify step: last token + 2, 0 and 3 drafts
TOL = 2e-2  # float16, as tests/lowering/test_paged_package.py measured


def selected_rows(lengths, drafts) -> np.ndarray:
    """The engine's logits_indices: each sequence's draft rows, then its last row."""
    ends = np.cumsum(lengths) - 1
    return np.concatenate([np.arange(end - d, end + 1) for end, d in zip(ends, drafts)]).astype(np.int32)


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    arch = tiny_arch()
    store = seeded_store(arch, 0)
    ir = make_ir(arch, io_dtype="float16", paged=True, heads=(HeadContract.ORT_GENAI,))
    ir = replace(ir, main=with_selected_logits(ir.main))
    out = tmp_path_factory.mktemp("pruned") / "pkg"
    emit(ir, store, out)
    return arch, store, out


@pytest.fixture(scope="module")
def runner(emitted):
    arch, store, out = emitted
    pool = BlockPool(len(PROMPTS), 4, 16, seed=4)
    return Qwen35Reference(arch, store), PagedRunner(lowered_session(out / "model.onnx"), pool, len(PROMPTS))


@pytest.fixture(scope="module")
def head_of_runner(emitted):
    """The head graph emitted beside the pruned main graph."""
    arch, store, out = emitted
    pool = BlockPool(len(PROMPTS), 4, 16, seed=8)
    return MtpHeadReference(arch, store), PagedRunner(lowered_session(out / ORT_HEAD_FILE), pool, len(PROMPTS))


def test_logits_rows_follow_logits_indices_and_hidden_rows_the_token_count(runner):
    reference, main = runner
    batch = len(PROMPTS)
    prompt_lengths = [len(p) for p in PROMPTS]
    prefill = main.run(PROMPTS, [0] * batch, main.initial_state(),
                       logits_indices=selected_rows(prompt_lengths, [0] * batch))
    assert prefill["logits"].shape == (batch, 256)  # one row per sequence
    assert prefill["hidden_states"].shape == (sum(prompt_lengths), 64)  # one row per packed token
    verify_lengths = [len(v) for v in VERIFY]
    drafts = [n - 1 for n in verify_lengths]
    step = main.run(VERIFY, prompt_lengths, presents_as_past(prefill), logits_indices=selected_rows(verify_lengths, drafts))
    # A verify step has drafts + 1 tokens per sequence, all selected: here the counts agree.
    assert step["logits"].shape == (sum(d + 1 for d in drafts), 256) == (8, 256)
    assert step["hidden_states"].shape == (sum(verify_lengths), 64) == (8, 64)
    rows = 0
    for b, prompt in enumerate(PROMPTS):
        logits, hidden, _, state = reference.forward(np.array([prompt]))
        assert np.abs(prefill["logits"][b] - logits[0, -1]).max() <= TOL
        assert np.abs(rows_of(prefill["hidden_states"], prompt_lengths, b) - hidden[0]).max() <= TOL
        logits, hidden, _, _ = reference.forward(np.array([VERIFY[b]]), state)
        selected = step["logits"][rows : rows + drafts[b] + 1]
        rows += drafts[b] + 1
        assert np.abs(selected - logits[0, -drafts[b] - 1 :]).max() <= TOL
        assert np.abs(rows_of(step["hidden_states"], verify_lengths, b) - hidden[0]).max() <= TOL


def test_the_head_reads_every_hidden_row_of_a_pruned_main_graph(runner, head_of_runner):
    """3 logits rows, 15 hidden rows: the head drafts from the hidden rows, one per token."""
    _, main = runner
    head_reference, head = head_of_runner
    lengths = [len(p) for p in PROMPTS]
    prefill = main.run(PROMPTS, [0, 0, 0], main.initial_state(), logits_indices=selected_rows(lengths, [0, 0, 0]))
    assert prefill["logits"].shape[0] == 3 and prefill["hidden_states"].shape[0] == 15
    ids = [p[1:] + [int(np.argmax(prefill["logits"][b]))] for b, p in enumerate(PROMPTS)]
    positions = np.concatenate([np.arange(1, 1 + n) for n in lengths])
    out = head.run(ids, [0, 0, 0], head.initial_state(), hidden_states=prefill["hidden_states"],
                   position_ids=np.broadcast_to(positions, (3, positions.size)).copy())
    for b in range(len(PROMPTS)):
        seed = rows_of(prefill["hidden_states"], lengths, b).astype(np.float64)
        logits, hidden, _ = head_reference.forward(np.array([ids[b]]), seed[None], np.arange(1, 1 + lengths[b])[None])
        assert np.abs(rows_of(out["logits"], lengths, b) - logits[0]).max() <= TOL
        assert np.abs(rows_of(out["hidden_states_out"], lengths, b) - hidden[0]).max() <= TOL


def test_selected_rows_may_mix_last_rows_and_verified_rows(runner):
    # A sequence prefilling (5 tokens) next to one whose 3 rows are all selected: 1 + 3 logits rows, 9 hidden rows.
    # The graph takes any selection; on a hybrid model the 0.18.0 engine itself never puts drafts beside a
    # prefill (PagedCacheManager::PlanStepResources drops them for that step).
    reference, main = runner
    tokens, drafts = [PROMPTS[0], [7, 128, 64]], [0, 2]
    lengths = [len(t) for t in tokens]
    out = main.run(tokens + [[1]], [0, 0, 0], main.initial_state(),
                   logits_indices=selected_rows(lengths + [1], drafts + [0]))
    assert out["logits"].shape[0] == 5 and out["hidden_states"].shape[0] == 9
    want0 = reference.forward(np.array([tokens[0]]))[0][0, -1]
    want1 = reference.forward(np.array([tokens[1]]))[0][0]
    assert np.abs(out["logits"][0] - want0).max() <= TOL
    assert np.abs(out["logits"][1:4] - want1).max() <= TOL


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pruned-spec") / "pkg"
    write_package(build(SPEC).artifacts, out)
    return out


def _dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_genai_config_names_the_selected_rows_input_and_the_runtime_parses_it(package):
    doc = json.loads((package / "genai_config.json").read_text(encoding="utf-8"))
    decoder = doc["model"]["decoder"]
    assert decoder["inputs"]["logits_indices"] == "logits_indices"
    assert doc["model"]["mtp"]["main_hidden_states"] == decoder["outputs"]["hidden_states"] == "hidden_states"
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    inputs, outputs = {v.name: v for v in graph.input}, {v.name: v for v in graph.output}
    # int32 [num_logits], as the 0.18.0 builder declares it with prune_lm_head (builders/base.py).
    assert inputs["logits_indices"].type.tensor_type.elem_type == onnx.TensorProto.INT32
    assert _dims(inputs["logits_indices"]) == ["num_logits"]
    # The engine treats a logits output whose first dim is not `batch_size` as one row per selected index.
    assert _dims(outputs["logits"]) == ["num_logits", 256]
    assert _dims(outputs["hidden_states"]) == ["num_tokens", 64]
    # The head is not pruned: its logits and hidden output keep one row per token.
    head = onnx.load(str(package / "mtp" / "mtp.onnx"), load_external_data=False).graph
    assert "logits_indices" not in {v.name for v in head.input}
    assert {v.name: _dims(v) for v in head.output}["logits"] == ["num_tokens", 256]
    og.Config(str(package))
