"""The main decoder graph on onnxruntime CPU against the independent numpy reference."""

import numpy as np
import pytest

from mtpc.graphs.blocks import mrope_axes
from mtpc.ir import Rope, SeedHidden

from .tiny import emit, empty_state, make_ir, presents_as_past, run, session

TOL = 1e-4
PROMPT = np.array([[3, 17, 42, 9, 250, 1], [7, 7, 128, 64, 2, 33]], np.int64)


@pytest.fixture(scope="module")
def main(arch, store, tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen35") / "pkg"
    emit(make_ir(arch, heads=()), store, out)
    return session(out / "model.onnx")


def step_feeds(ids: np.ndarray, past_length: int, past: dict) -> dict:
    b, s = ids.shape
    positions = np.broadcast_to(np.arange(past_length, past_length + s), (3, b, s)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": np.ones((b, past_length + s), np.int64),
            "position_ids": positions, **past}


def test_prefill_logits_and_hidden_match_reference(main, reference):
    out = run(main, step_feeds(PROMPT, 0, empty_state(main, 2)))
    logits, post, _, state = reference.forward(PROMPT)
    assert out["logits"].shape == (2, 6, 256)
    np.testing.assert_allclose(out["logits"], logits, atol=TOL, rtol=0)
    np.testing.assert_allclose(out["hidden_states"], post, atol=TOL, rtol=0)
    for i, (k, v) in state.kv.items():
        np.testing.assert_allclose(out[f"present.{i}.key"], k, atol=TOL)  # rotated keys, as GQA stores them
        np.testing.assert_allclose(out[f"present.{i}.value"], v, atol=TOL)
    for i in state.conv:
        np.testing.assert_allclose(out[f"present.{i}.conv"], state.conv[i], atol=TOL)
        np.testing.assert_allclose(out[f"present.{i}.recurrent"], state.recurrent[i], atol=TOL)


# GroupQueryAttention on CPU takes several new tokens after a past only for batch 1 (the MTP verify step).
@pytest.mark.parametrize("batch, new_tokens", [(2, 1), (1, 1), (1, 2), (1, 5)])
def test_steps_after_a_prefix_feed_present_state_back(main, reference, batch, new_tokens):
    prefix, continuation = PROMPT[:batch, :4], (PROMPT[:batch, ::-1] + 5)[:, :new_tokens]
    first = run(main, step_feeds(prefix, 0, empty_state(main, batch)))
    out = run(main, step_feeds(continuation, 4, presents_as_past(first)))
    _, _, _, state = reference.forward(prefix)
    logits, post, _, _ = reference.forward(continuation, state)
    np.testing.assert_allclose(out["logits"], logits, atol=TOL, rtol=0)
    np.testing.assert_allclose(out["hidden_states"], post, atol=TOL, rtol=0)
    assert out["present.1.key"].shape == (batch, 2, 4 + new_tokens, 64)


def test_pre_norm_seed_exposes_last_residual(arch, store, reference, tmp_path):
    emit(make_ir(arch, heads=(), seed_hidden=SeedHidden.PRE_NORM), store, tmp_path / "pkg")
    sess = session(tmp_path / "pkg" / "model.onnx")
    out = run(sess, step_feeds(PROMPT, 0, empty_state(sess, 2)))
    logits, _, pre, _ = reference.forward(PROMPT)
    np.testing.assert_allclose(out["hidden_states"], pre, atol=TOL, rtol=0)
    np.testing.assert_allclose(out["logits"], logits, atol=TOL, rtol=0)


def test_float16_logits_over_float32_io(arch, store, reference, tmp_path):
    # onnxruntime-genai 0.18.0's CPU MtpGenerator needs float16 logits from a float32 graph.
    emit(make_ir(arch, heads=(), logits_dtype="float16"), store, tmp_path / "pkg")
    sess = session(tmp_path / "pkg" / "model.onnx")
    out = run(sess, step_feeds(PROMPT, 0, empty_state(sess, 2)))
    logits, post, _, _ = reference.forward(PROMPT)
    assert out["logits"].dtype == np.float16 and out["hidden_states"].dtype == np.float32
    np.testing.assert_allclose(out["logits"].astype(np.float64), logits, atol=4e-3, rtol=1e-3)
    np.testing.assert_allclose(out["hidden_states"], post, atol=TOL, rtol=0)


def test_float16_io_graph_runs_close_to_reference(arch, store, reference, tmp_path):
    emit(make_ir(arch, heads=(), io_dtype="float16"), store, tmp_path / "pkg")
    sess = session(tmp_path / "pkg" / "model.onnx")
    out = run(sess, step_feeds(PROMPT, 0, empty_state(sess, 2)))
    logits, _, _, _ = reference.forward(PROMPT)
    assert out["logits"].dtype == np.float16
    # float16 activations through 4 layers: measured 4.7e-3 against the numpy reference.
    assert np.abs(out["logits"].astype(np.float64) - logits).max() < 1e-2


def test_interleaved_mrope_slot_assignment():
    # HF interleaved MRoPE: slots cycle T, H, W; H takes slots 1, 4, .. below 3*sections[1], W 2, 5, .. below
    # 3*sections[2]; the rest are T.
    tiny = Rope(theta=1e4, partial_rotary_factor=0.25, head_dim=64, mrope_section=(3, 3, 2))
    assert mrope_axes(tiny).tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    big = mrope_axes(Rope(theta=1e7, partial_rotary_factor=0.25, head_dim=256, mrope_section=(11, 11, 10)))
    assert [j for j in range(32) if big[j] == 1] == list(range(1, 33, 3))
    assert [j for j in range(32) if big[j] == 2] == list(range(2, 30, 3))
    contiguous = Rope(theta=1e4, partial_rotary_factor=0.25, head_dim=64, mrope_section=(4, 2, 2),
                      mrope_interleaved=False)
    assert mrope_axes(contiguous).tolist() == [0, 0, 0, 0, 1, 1, 2, 2]


def test_position_rows_drive_their_frequency_slots(main, reference):
    # With T/H/W rows that differ, changing only the W row must change the output (slots 2 and 5 read it),
    # and equal rows must reproduce the text-only result.
    ids = PROMPT[:1]
    text = np.broadcast_to(np.arange(6), (3, 1, 6)).astype(np.int64)
    base = run(main, {**step_feeds(ids, 0, empty_state(main, 1)), "position_ids": text})["logits"]
    moved = text.copy()
    moved[2] = moved[2] * 3  # a constant shift would cancel: rotary is relative
    changed = run(main, {**step_feeds(ids, 0, empty_state(main, 1)), "position_ids": moved})["logits"]
    # Measured: 1.4e-2 of the largest logit; ignoring the W row would leave only float noise (~1e-7).
    assert np.abs(changed - base).max() > 1e-3 * np.abs(base).max()
    np.testing.assert_allclose(base, reference.forward(ids)[0], atol=TOL, rtol=0)  # the text-only reference
