"""Rejected drafts on the hybrid paged decoder: the compact state updates roll the linear layers back.

onnxruntime-genai 0.18.0's paged engine verifies drafts as one packed step per sequence (the last
accepted token plus the drafts) with `state_update_capture_count` = the number of drafts, then keeps
only the accepted prefix. Full-attention KV needs nothing: the rejected tokens' slots lie past the
sequence's `past_sequence_lengths` and are overwritten next step. The conv and recurrent state cannot
be cropped, so the engine rebuilds it from the state before the step and the captured transitions
(`FixedStateReservation::CommitPrefix`); `reference.replay_conv` / `replay_recurrent` do the same.
The rolled-back state must equal the state of never having seen the rejected tokens, and decoding on
from it must match the reference that never saw them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx_ir as oir
import pytest

from mtpc.graphs import paged as paged_graphs
from mtpc.ir import LayerKind
from mtpc.passes.paged_io import with_state_updates
from mtpc.reference.forward import Qwen35Reference
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.arch import tiny_arch
from tests.graphs.tiny import emit, make_ir, presents_as_past

from . import reference as replay
from .paged_runner import BlockPool, PagedRunner, lowered_session, rows_of

CAPACITY = 3
PROMPTS = [[3, 17, 42, 9, 250], [7, 128, 64], [11, 5, 200, 31, 8, 99, 2]]
# The verify step: the token each sequence decoded last, then its drafts (3, 1 and 2 of them).
VERIFY = [[13, 60, 61, 62], [40, 90], [77, 30, 31]]
TOLERANCE = {"float32": 1e-4, "float16": 2e-2}


@pytest.fixture(scope="module", params=["float32", "float16"])
def runner(request, tmp_path_factory):
    io_dtype = request.param
    arch = tiny_arch()
    store = seeded_store(arch, 0)
    ir = make_ir(arch, io_dtype=io_dtype, paged=True, heads=())
    ir = replace(ir, main=with_state_updates(ir.main, arch, CAPACITY))
    out = tmp_path_factory.mktemp(f"rollback-{io_dtype}") / "pkg"
    with pytest.MonkeyPatch.context() as patch:
        if io_dtype == "float32":  # mtpc emits paged graphs in float16 only; see test_paged_package.py
            patch.setattr(paged_graphs, "PAGED_IO_DTYPES", (*paged_graphs.PAGED_IO_DTYPES, oir.DataType.FLOAT))
        emit(ir, store, out)
    pool = BlockPool(len(PROMPTS), 4, 16, seed=3)
    main = PagedRunner(lowered_session(out / "model.onnx"), pool, len(PROMPTS))
    return io_dtype, arch, Qwen35Reference(arch, store), main


def capture(counts, active):
    return {"state_update_capture_count": np.array(counts, np.int32), "state_update_active": np.array([active], np.int32)}


@pytest.fixture(scope="module")
def verified(runner):
    io_dtype, arch, reference, main = runner
    batch = len(PROMPTS)
    prefill = main.run(PROMPTS, [0] * batch, main.initial_state(), **capture([0] * batch, 0))
    before = presents_as_past(prefill)
    drafts = [len(v) - 1 for v in VERIFY]
    step = main.run(VERIFY, [len(p) for p in PROMPTS], before, **capture(drafts, 1))
    return before, step


def rolled_back(arch, before, step, b: int, kept: int) -> dict[str, np.ndarray]:
    """Sequence b's conv / recurrent state after keeping `kept` tokens of the verify step."""
    state = {}
    for i in arch.layers_of(LayerKind.LINEAR_ATTENTION):
        if kept == len(VERIFY[b]):  # everything accepted: the op's own final state
            state[f"past.{i}.conv"] = step[f"present.{i}.conv"][b]
            state[f"past.{i}.recurrent"] = step[f"present.{i}.recurrent"][b]
        else:
            state[f"past.{i}.conv"] = replay.replay_conv(before[f"past.{i}.conv"][b],
                                                         step[f"state_update.{i}.conv_value"][b], kept)
            state[f"past.{i}.recurrent"] = replay.replay_recurrent(
                before[f"past.{i}.recurrent"][b], step[f"state_update.{i}.recurrent_capsule"][b], kept,
                capacity=CAPACITY, key_heads=arch.linear_attention.num_key_heads)
    return state


def test_rollback_gives_the_state_of_never_having_seen_the_rejected_drafts(runner, verified):
    io_dtype, arch, reference, _ = runner
    before, step = verified
    tol = TOLERANCE[io_dtype]
    for b, prompt in enumerate(PROMPTS):
        _, _, _, after_prompt = reference.forward(np.array([prompt]))
        for kept in range(1, len(VERIFY[b]) + 1):  # the verified token is always kept
            _, _, _, want = reference.forward(np.array([VERIFY[b][:kept]]), after_prompt)
            got = rolled_back(arch, before, step, b, kept)
            for i in want.conv:
                conv_err = np.abs(got[f"past.{i}.conv"] - want.conv[i][0]).max()
                rec_err = np.abs(got[f"past.{i}.recurrent"] - want.recurrent[i][0].transpose(0, 2, 1)).max()
                assert conv_err <= tol and rec_err <= tol, (b, kept, i, conv_err, rec_err)


def test_without_the_rollback_rejected_drafts_leak_into_the_state(runner, verified):
    # The check above is not vacuous: the op's final state (every draft accepted) differs from a prefix's.
    _, arch, reference, _ = runner
    _, step = verified
    _, _, _, after_prompt = reference.forward(np.array([PROMPTS[0]]))
    _, _, _, one_token = reference.forward(np.array([VERIFY[0][:1]]), after_prompt)
    assert np.abs(step["present.0.recurrent"][0] - one_token.recurrent[0][0].transpose(0, 2, 1)).max() > 1e-2


def test_decoding_on_from_a_rolled_back_state_matches_the_reference(runner, verified):
    """Keep 2, 1 and all 3 tokens of the verify step, then decode one token per sequence."""
    io_dtype, arch, reference, main = runner
    before, step = verified
    tol = TOLERANCE[io_dtype]
    kept = [2, 1, 3]
    state = {name: value for name, value in presents_as_past(step).items() if name.startswith("past_key_values.")}
    per_sequence = [rolled_back(arch, before, step, b, k) for b, k in enumerate(kept)]
    for name in per_sequence[0]:
        dtype = step[name.replace("past.", "present.")].dtype
        state[name] = np.stack([s[name] for s in per_sequence]).astype(dtype)
    following = [[5], [6], [7]]
    past = [len(p) + k for p, k in zip(PROMPTS, kept)]
    result = main.run(following, past, state, **capture([0, 0, 0], 0))
    for b, prompt in enumerate(PROMPTS):
        _, _, _, after = reference.forward(np.array([prompt + VERIFY[b][: kept[b]]]))
        logits, hidden, _, _ = reference.forward(np.array([following[b]]), after)
        err = np.abs(rows_of(result["logits"], [1, 1, 1], b) - logits[0]).max()
        assert err <= tol, (b, err)
