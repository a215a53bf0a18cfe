"""The numpy reference against itself and against closed-form facts of the architecture.

It is the oracle for every graph test, so these tests pin what it must satisfy
independently of any graph: incremental decoding equals one prefill, the delta
rule equals its matrix form, RoPE is relative, the conv uses its last tap for the
current token, and the MTP head concatenates the embedding first.
"""

from __future__ import annotations

import numpy as np
import pytest

from mtpc.reference.forward import (
    MtpHeadReference,
    Qwen35Reference,
    causal_conv1d,
    gated_delta_rule,
    rms_norm,
    rope,
)
from mtpc.sources.random_weights import seeded_store
from mtpc.weights import ArrayWeightStore
from tests.fixtures.checkpoints import tiny_arch

ARCH = tiny_arch()


@pytest.fixture(scope="module")
def store():
    return seeded_store(ARCH, seed=7)


@pytest.fixture(scope="module")
def model(store):
    return Qwen35Reference(ARCH, store)


@pytest.fixture(scope="module")
def tokens():
    return np.random.default_rng(1).integers(0, ARCH.vocab_size, size=(2, 11))


def test_state_holds_kv_for_full_layers_and_conv_recurrent_for_linear_layers(model, tokens):
    *_, state = model.forward(tokens[:, :3])
    la = ARCH.linear_attention
    assert sorted(state.kv) == [1, 3]
    assert sorted(state.conv) == sorted(state.recurrent) == [0, 2]
    assert state.kv[1][0].shape == (2, ARCH.num_key_value_heads, 3, ARCH.head_dim)
    assert state.conv[0].shape == (2, la.conv_dim, la.conv_kernel - 1)
    assert state.recurrent[0].shape == (2, la.num_value_heads, la.key_head_dim, la.value_head_dim)
    assert state.length == 3


@pytest.mark.parametrize("split", [(3, 1, 2, 5), (5, 2, 2, 2), (6, 5), (1, 5, 2, 1, 1, 1)])
def test_prefill_equals_prefix_then_steps(model, tokens, split):
    assert sum(split) == tokens.shape[1]
    full_logits, full_post, full_pre, full_state = model.forward(tokens)
    state, pieces, start = None, [], 0
    for count in split:
        logits, post, pre, state = model.forward(tokens[:, start : start + count], state)
        pieces.append((logits, post, pre))
        start += count
    for output, want in enumerate((full_logits, full_post, full_pre)):
        got = np.concatenate([piece[output] for piece in pieces], axis=1)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    for i in full_state.kv:
        np.testing.assert_allclose(state.kv[i][0], full_state.kv[i][0], atol=1e-12)
        np.testing.assert_allclose(state.kv[i][1], full_state.kv[i][1], atol=1e-12)
    for i in full_state.conv:
        np.testing.assert_allclose(state.conv[i], full_state.conv[i], atol=1e-12)
        np.testing.assert_allclose(state.recurrent[i], full_state.recurrent[i], atol=1e-12)


def test_batch_rows_are_independent(model, tokens):
    both = model.forward(tokens)[0]
    alone = model.forward(tokens[1:])[0]
    np.testing.assert_allclose(both[1:], alone, atol=1e-12)


def test_outputs_are_float64_and_hidden_taps_relate_through_the_final_norm(model, store, tokens):
    logits, post, pre, _ = model.forward(tokens)
    assert logits.dtype == post.dtype == pre.dtype == np.float64
    assert logits.shape == (2, 11, ARCH.vocab_size)
    norm = store.read_float("norm.weight").astype(np.float64)
    expected_post = pre / np.sqrt((pre**2).mean(-1, keepdims=True) + ARCH.rms_norm_eps) * norm
    np.testing.assert_allclose(post, expected_post, atol=1e-12)
    np.testing.assert_allclose(logits, post @ store.read_float("lm_head.weight").T.astype(np.float64), atol=1e-10)


def test_greedy_tokens_are_the_argmax_of_a_full_forward(model):
    prompt = [5, 17, 42]
    generated = model.greedy(prompt, 6)
    assert len(generated) == 6
    for t, token in enumerate(generated):
        logits = model.forward(np.array([prompt + generated[:t]]))[0]
        assert token == int(np.argmax(logits[0, -1]))


def test_delta_rule_matches_its_matrix_form():
    # S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = scale S_t^T q_t
    rng = np.random.default_rng(3)
    b, s, h, dk, dv = 1, 4, 2, 3, 5
    q, k = rng.standard_normal((b, s, h, dk)), rng.standard_normal((b, s, h, dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((b, s, h, dv))
    g, beta = -rng.uniform(0.1, 1.0, (b, s, h)), rng.uniform(0.1, 0.9, (b, s, h))
    initial = rng.standard_normal((b, h, dk, dv))
    out, final = gated_delta_rule(q, k, v, g, beta, initial, scale=0.5)
    for head in range(h):
        state = initial[0, head]
        for t in range(s):
            kt, bt = k[0, t, head][:, None], beta[0, t, head]
            transition = np.exp(g[0, t, head]) * (np.eye(dk) - bt * kt @ kt.T)
            state = transition @ state + bt * kt @ v[0, t, head][None, :]
            np.testing.assert_allclose(out[0, t, head], 0.5 * state.T @ q[0, t, head], atol=1e-12)
        np.testing.assert_allclose(final[0, head], state, atol=1e-12)


def test_causal_conv_uses_the_last_tap_for_the_current_input():
    weight = np.arange(1.0, 1 + 2 * 4).reshape(2, 1, 4)
    x = np.array([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]])
    out, state = causal_conv1d(x, np.zeros((1, 2, 3)), weight)
    for c in range(2):
        # a zero-padded causal convolution: y[t] = sum_j w[j] x[t - 3 + j]
        expected = np.convolve(np.concatenate([np.zeros(3), x[0, c]]), weight[c, 0, ::-1], mode="valid")
        np.testing.assert_allclose(out[0, c], expected)
    np.testing.assert_array_equal(state, x)  # the last K-1 = 3 inputs


def test_rope_rotates_half_split_pairs_and_is_relative():
    rng = np.random.default_rng(4)
    rd, theta = 16, 10000.0
    q, k = rng.standard_normal((1, 1, 1, 64)), rng.standard_normal((1, 1, 1, 64))

    def score(pq, pk):
        return float(np.sum(rope(q, np.array([[pq]]), rd, theta) * rope(k, np.array([[pk]]), rd, theta)))

    assert score(7, 3) == pytest.approx(score(104, 100), abs=1e-9)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-6)
    rotated = rope(q, np.array([[1]]), rd, theta)[0, 0, 0]
    np.testing.assert_array_equal(rotated[rd:], q[0, 0, 0, rd:])  # channels past rotary_dim pass through
    # slot 0 pairs channel 0 with channel rd/2 at frequency theta^0 = 1 (NeoX half split, not GPT-J)
    c, s_ = np.cos(1.0), np.sin(1.0)
    x = q[0, 0, 0]
    assert rotated[0] == pytest.approx(x[0] * c - x[rd // 2] * s_)
    assert rotated[rd // 2] == pytest.approx(x[rd // 2] * c + x[0] * s_)


def test_rms_norm_scales_by_the_weight_as_given():
    # x = [3, 4]: mean square 12.5. Canonical weights already hold 1 + w, so rms_norm must not add 1:
    # with [1.5, 0.5] the output is x / sqrt(12.5) * [1.5, 0.5], not * [2.5, 1.5].
    got = rms_norm(np.array([[3.0, 4.0]]), np.array([1.5, 0.5]), 0.0)
    np.testing.assert_allclose(got, [[4.5 / np.sqrt(12.5), 2.0 / np.sqrt(12.5)]], rtol=1e-15)
    # eps sits inside the root: mean square 12.5 + 3.5 = 16
    np.testing.assert_allclose(rms_norm(np.array([[3.0, 4.0]]), np.ones(2), 3.5), [[0.75, 1.0]], rtol=1e-15)


def test_offset_norm_is_applied_once(store, tokens):
    # The store already holds 1 + w. A reference that added 1 again would equal the reference run on a store
    # whose offset norms got +1 a second time; it must not, and its final norm must scale by the stored value.
    offset = (
        "input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight",
        "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight",
    )
    tensors = {n: store.read(n) for n in store.names()}
    doubled = {
        n: (v + np.float32(1) if n.endswith(offset) or n in ("norm.weight", "mtp.norm.weight") else v)
        for n, v in tensors.items()
    }
    logits, post, pre, _ = Qwen35Reference(ARCH, store).forward(tokens)
    twice = Qwen35Reference(ARCH, ArrayWeightStore(doubled)).forward(tokens)[0]
    assert np.abs(logits - twice).max() > 0.1
    weight = tensors["norm.weight"].astype(np.float64)
    assert abs(weight.mean() - 1.0) < 0.1  # effective scale 1 + w with w near 0
    rms = np.sqrt((pre**2).mean(-1, keepdims=True) + ARCH.rms_norm_eps)
    np.testing.assert_allclose(post, pre / rms * weight, rtol=1e-12)
    assert np.abs(post - pre / rms * (weight + 1)).max() > 0.1


def test_norm_weights_change_the_output(store, tokens):
    # With norm_weight_scale > 0 the effective scales differ from 1, so a graph that drops or doubles the
    # +1 offset cannot match: check the reference is sensitive to exactly that.
    tensors = {n: store.read(n) for n in store.names()}
    dropped = {n: (v - 1.0 if n.endswith("layernorm.weight") else v) for n, v in tensors.items()}
    base = Qwen35Reference(ARCH, store).forward(tokens)[0]
    other = Qwen35Reference(ARCH, ArrayWeightStore(dropped)).forward(tokens)[0]
    assert np.abs(base - other).max() > 0.1


# ----------------------------------------------------------------------------- MTP head


@pytest.fixture(scope="module")
def head(store):
    return MtpHeadReference(ARCH, store)


def test_head_incremental_equals_one_pass(head, model, tokens):
    _, post, _, _ = model.forward(tokens)
    ids, seed, positions = tokens[:, 1:], post[:, :-1], np.arange(1, 11)[None, :]
    logits, hidden, kv = head.forward(ids, seed, positions)
    got_logits, got_hidden, state = [], [], None
    for start, stop in ((0, 4), (4, 5), (5, 10)):
        lg, hd, state = head.forward(ids[:, start:stop], seed[:, start:stop], positions[:, start:stop], state)
        got_logits.append(lg)
        got_hidden.append(hd)
    np.testing.assert_allclose(np.concatenate(got_logits, 1), logits, atol=1e-10)
    np.testing.assert_allclose(np.concatenate(got_hidden, 1), hidden, atol=1e-10)
    np.testing.assert_allclose(state[0], kv[0], atol=1e-12)
    assert kv[0].shape == (2, ARCH.num_key_value_heads, 10, ARCH.head_dim)


def test_head_output_is_mtp_norm_then_shared_lm_head(head, store, tokens):
    seed = np.random.default_rng(6).standard_normal((2, 3, ARCH.hidden_size))
    logits, hidden, _ = head.forward(tokens[:, :3], seed, np.arange(3)[None, :])
    rms = np.sqrt((hidden**2).mean(-1))
    # hidden = x_hat * mtp.norm: dividing by the weight leaves unit RMS
    unit = hidden / store.read_float("mtp.norm.weight").astype(np.float64)
    np.testing.assert_allclose(np.sqrt((unit**2).mean(-1)), 1.0, atol=1e-4)
    assert rms.min() > 0.5
    np.testing.assert_allclose(logits, hidden @ store.read_float("lm_head.weight").T.astype(np.float64), atol=1e-10)


def test_head_concatenates_the_embedding_first(store, tokens):
    # Zero the fc columns of the second half: if that half is the seed hidden, the seed stops mattering.
    tensors = {n: store.read(n) for n in store.names()}
    fc = tensors["mtp.fc.weight"].copy()
    fc[:, ARCH.hidden_size :] = 0.0
    head = MtpHeadReference(ARCH, ArrayWeightStore({**tensors, "mtp.fc.weight": fc}))
    rng = np.random.default_rng(8)
    positions = np.arange(3)[None, :]
    a = head.forward(tokens[:, :3], rng.standard_normal((2, 3, ARCH.hidden_size)), positions)[0]
    b = head.forward(tokens[:, :3], rng.standard_normal((2, 3, ARCH.hidden_size)), positions)[0]
    np.testing.assert_allclose(a, b, atol=1e-12)
    c = head.forward(tokens[:, 3:6], rng.standard_normal((2, 3, ARCH.hidden_size)), positions)[0]
    assert np.abs(a - c).max() > 1e-3


def test_head_needs_an_mtp_architecture(store):
    with pytest.raises(ValueError):
        MtpHeadReference(tiny_arch(mtp_num_layers=0), store)
