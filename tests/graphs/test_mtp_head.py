"""The MTP head graphs (both runtime contracts) on onnxruntime CPU against the numpy head reference."""

import numpy as np
import onnx
import pytest

from mtpc.ir.contracts import EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from mtpc.sources.random_weights import seeded_store

from .tiny import ONNX_GENAI_HEAD_FILE, ORT_HEAD_FILE, emit, empty_state, make_ir, run, session

TOL = 1e-4
IDS = np.array([[5, 99, 31, 200, 8]], np.int64)


@pytest.fixture(scope="module")
def store(arch):
    return seeded_store(arch, 3)


@pytest.fixture(scope="module")
def package(arch, store, tmp_path_factory):
    out = tmp_path_factory.mktemp("heads") / "pkg"
    emit(make_ir(arch), store, out)
    return out


@pytest.fixture(scope="module")
def seed(arch, store):
    """The main model's post-norm hidden states for IDS: what the runtime feeds the head."""
    _, post, _, _ = Qwen35Reference(arch, store).forward(IDS)
    return post.astype(np.float32)


@pytest.fixture(scope="module")
def head_reference(arch, store):
    return MtpHeadReference(arch, store)


def ort_feeds(ids, seed, positions, past, past_length):
    b, s = ids.shape
    return {"input_ids": ids, "hidden_states": seed, "attention_mask": np.ones((b, past_length + s), np.int64),
            "position_ids": np.broadcast_to(positions, (3, b, s)).astype(np.int64), **past}


def test_ort_head_logits_and_hidden_match_reference(package, seed, head_reference):
    sess = session(package / ORT_HEAD_FILE)
    # Draft position j embeds token j+1 against the seed of token j (absolute positions 1..4).
    ids, hidden, positions = IDS[:, 1:], seed[:, :-1], np.arange(1, 5)[None]
    out = run(sess, ort_feeds(ids, hidden, positions, empty_state(sess, 1), 0))
    logits, normed, (keys, values) = head_reference.forward(ids, hidden, positions)
    np.testing.assert_allclose(out["logits"], logits, atol=TOL, rtol=0)
    np.testing.assert_allclose(out["hidden_states_out"], normed, atol=TOL, rtol=0)
    np.testing.assert_allclose(out["present.0.key"], keys, atol=TOL)
    np.testing.assert_allclose(out["present.0.value"], values, atol=TOL)


def test_ort_head_chained_step_uses_its_own_kv(package, seed, head_reference):
    sess = session(package / ORT_HEAD_FILE)
    ids, hidden, positions = IDS[:, 1:4], seed[:, :3], np.arange(1, 4)[None]
    first = run(sess, ort_feeds(ids, hidden, positions, empty_state(sess, 1), 0))
    _, _, kv = head_reference.forward(ids, hidden, positions)
    # next draft: the head's own feedback hidden, one more token, position 4
    nxt_ids, nxt_hidden = IDS[:, 4:5], first["hidden_states_out"][:, -1:]
    past = {"past_key_values.0.key": first["present.0.key"], "past_key_values.0.value": first["present.0.value"]}
    out = run(sess, ort_feeds(nxt_ids, nxt_hidden, np.array([[4]]), past, 3))
    logits, normed, _ = head_reference.forward(nxt_ids, nxt_hidden, np.array([[4]]), kv)
    np.testing.assert_allclose(out["logits"], logits, atol=TOL, rtol=0)
    np.testing.assert_allclose(out["hidden_states_out"], normed, atol=TOL, rtol=0)


def test_onnx_genai_head_mtp_hidden_matches_reference(package, store, seed, head_reference):
    sess = session(package / ONNX_GENAI_HEAD_FILE)
    ids, hidden = IDS[:, 1:], seed[:, :-1]
    positions = np.arange(35, 39)[None]  # absolute target positions, rank 2
    embeds = store.read_float("embed_tokens.weight")[ids]
    out = run(sess, {"inputs_embeds": embeds, "hidden_states": hidden, "attention_mask": np.ones((1, 4), np.int64),
                     "position_ids": positions, **empty_state(sess, 1)})
    assert set(out) == {"mtp_hidden", "present.0.key", "present.0.value"}
    _, normed, _ = head_reference.forward(ids, hidden, positions)
    np.testing.assert_allclose(out["mtp_hidden"], normed, atol=TOL, rtol=0)


def test_onnx_genai_head_has_no_embedding_or_lm_head(package):
    model = onnx.load(package / ONNX_GENAI_HEAD_FILE, load_external_data=False)
    names = {i.name for i in model.graph.initializer}
    assert EMBEDDING_INITIALIZER not in names and not any(n.startswith("lm_head") for n in names)
    assert [o.name for o in model.graph.output] == ["mtp_hidden", "present.0.key", "present.0.value"]


def test_ort_head_reuses_the_main_models_embedding_and_lm_head(package):
    def tensors(path):
        model = onnx.load(path)
        return {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}

    main, head = tensors(package / "model.onnx"), tensors(package / ORT_HEAD_FILE)
    for name in (EMBEDDING_INITIALIZER, LM_HEAD_INITIALIZER):
        assert head[name].tobytes() == main[name].tobytes()
