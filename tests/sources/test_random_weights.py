"""Seeded random weights: deterministic, order-independent, complete, and in both conventions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mtpc.ir import SourceRef
from mtpc.reference.forward import Qwen35Reference
from mtpc.sources import describe, open_weights
from mtpc.sources.hf import reader as hf
from mtpc.sources.random_weights import canonical_tensors, raw_hf_tensors, seeded_store
from tests.fixtures.checkpoints import tiny_arch, write_hf_checkpoint

ARCH = tiny_arch()


def test_same_seed_same_values_other_seed_other_values():
    a, b, c = seeded_store(ARCH, 0), seeded_store(ARCH, 0), seeded_store(ARCH, 1)
    for name in a.names():
        np.testing.assert_array_equal(a.read(name), b.read(name))
    assert not np.array_equal(a.read("layers.0.mlp.up_proj.weight"), c.read("layers.0.mlp.up_proj.weight"))


def test_a_tensor_does_not_depend_on_which_other_tensors_exist():
    small, large = seeded_store(tiny_arch(num_layers=2), 3), seeded_store(tiny_arch(num_layers=4), 3)
    for name in small.names():
        if not name.startswith("mtp."):
            np.testing.assert_array_equal(small.read(name), large.read(name), err_msg=name)


def test_canonical_names_and_shapes_of_the_tiny_model():
    store = seeded_store(ARCH, 0)
    shapes = {n: store.info(n).shape for n in store.names()}
    la = ARCH.linear_attention
    # tiny_arch: H 64, I 128, 4 q heads x 64, 2 kv heads, V 256; linear: 2 key heads x 16, 4 value heads x 16
    expected = {
        "embed_tokens.weight": (256, 64),
        "lm_head.weight": (256, 64),
        "norm.weight": (64,),
        "layers.1.self_attn.q_proj.weight": (512, 64),
        "layers.1.self_attn.k_proj.weight": (128, 64),
        "layers.1.self_attn.o_proj.weight": (64, 256),
        "layers.1.self_attn.q_norm.weight": (64,),
        "layers.0.linear_attn.in_proj_qkv.weight": (2 * 32 + 64, 64),
        "layers.0.linear_attn.in_proj_z.weight": (64, 64),
        "layers.0.linear_attn.in_proj_a.weight": (4, 64),
        "layers.0.linear_attn.conv1d.weight": (128, 1, la.conv_kernel),
        "layers.0.linear_attn.decay_scale": (4,),
        "layers.0.linear_attn.dt_bias": (4,),
        "layers.0.linear_attn.norm.weight": (16,),
        "layers.0.linear_attn.out_proj.weight": (64, 64),
        "layers.2.mlp.down_proj.weight": (64, 128),
        "mtp.fc.weight": (64, 128),
        "mtp.pre_fc_norm_embedding.weight": (64,),
        "mtp.pre_fc_norm_hidden.weight": (64,),
        "mtp.norm.weight": (64,),
        "mtp.layers.0.self_attn.q_proj.weight": (512, 64),
        "mtp.layers.0.mlp.gate_proj.weight": (128, 64),
    }
    for name, shape in expected.items():
        assert shapes[name] == shape, name
    assert "layers.0.self_attn.q_proj.weight" not in shapes  # layer 0 is linear attention
    assert "layers.1.linear_attn.in_proj_qkv.weight" not in shapes
    assert not any("A_log" in n or n.startswith("model.") for n in shapes)
    assert len([n for n in shapes if n.startswith("mtp.")]) == 15


def test_no_mtp_tensors_without_a_head():
    store = seeded_store(tiny_arch(mtp_num_layers=0), 0)
    assert not [n for n in store.names() if n.startswith("mtp.")]


def test_canonical_values_follow_from_hf_values():
    raw = raw_hf_tensors(ARCH, 0, norm_weight_scale=0.2)
    store = seeded_store(ARCH, 0, norm_weight_scale=0.2)
    text = "model.language_model."
    for name in ("norm.weight", "layers.1.self_attn.k_norm.weight", "layers.2.post_attention_layernorm.weight"):
        np.testing.assert_array_equal(store.read(name), raw[text + name] + np.float32(1))
    for name in ("mtp.norm.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.layers.0.input_layernorm.weight"):
        np.testing.assert_array_equal(store.read(name), raw[name] + np.float32(1))
    # the gated norm is not offset form
    np.testing.assert_array_equal(
        store.read("layers.0.linear_attn.norm.weight"), raw[text + "layers.0.linear_attn.norm.weight"]
    )
    np.testing.assert_allclose(
        store.read("layers.2.linear_attn.decay_scale"), -np.exp(raw[text + "layers.2.linear_attn.A_log"]), rtol=1e-6
    )
    np.testing.assert_array_equal(store.read("lm_head.weight"), raw["lm_head.weight"])


def test_offset_norms_centre_near_zero_raw_and_near_one_effective():
    raw = raw_hf_tensors(ARCH, 0, norm_weight_scale=0.1)
    offset = raw["model.language_model.layers.0.input_layernorm.weight"]
    assert abs(offset.mean()) < 0.05 and 0.05 < offset.std() < 0.15
    assert abs(raw["model.language_model.layers.0.linear_attn.norm.weight"].mean() - 1) < 0.1


def test_tied_model_has_no_stored_lm_head_and_reads_the_embedding():
    arch = replace(ARCH, tie_word_embeddings=True)
    assert "lm_head.weight" not in raw_hf_tensors(arch, 0)
    store = seeded_store(arch, 0)
    np.testing.assert_array_equal(store.read("lm_head.weight"), store.read("embed_tokens.weight"))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_activations_stay_order_one_over_four_layers(seed):
    model = Qwen35Reference(ARCH, seeded_store(ARCH, seed))
    ids = np.random.default_rng(seed).integers(0, ARCH.vocab_size, (1, 16))
    logits, post, pre, _ = model.forward(ids)
    assert np.all(np.isfinite(logits))
    assert 0.5 < np.sqrt((pre**2).mean()) < 5
    assert 0.3 < logits.std() < 3


def test_canonical_form_is_derived_without_the_hf_converter(monkeypatch):
    # seeded_store is the expected value for the HF store (tests/sources/test_hf.py): it must not share
    # hf.py's conversion, or a bug there would be in both sides of that comparison. Breaking hf.py's
    # converter and name mapping leaves seeded_store unchanged.
    before = seeded_store(ARCH, 0)
    monkeypatch.setattr(hf, "to_canonical_value", lambda name, raw: raw)
    monkeypatch.setattr(hf, "canonical_name", lambda name: name)
    after = seeded_store(ARCH, 0)
    assert list(after.names()) == list(before.names())
    for name in before.names():
        np.testing.assert_array_equal(after.read(name), before.read(name), err_msg=name)


def test_canonical_tensors_by_hand():
    # One tensor of each kind, with values small enough to check by eye.
    raw = {
        "model.language_model.embed_tokens.weight": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
        "model.language_model.norm.weight": np.array([0.5, -0.25], np.float32),
        "model.language_model.layers.0.linear_attn.A_log": np.array([0.0, np.log(2.0)], np.float32),
        "model.language_model.layers.0.linear_attn.norm.weight": np.array([0.9, 1.1], np.float32),
        "model.language_model.layers.1.self_attn.q_norm.weight": np.array([0.0, 1.0], np.float32),
        "mtp.pre_fc_norm_hidden.weight": np.array([-1.0, 0.125], np.float32),
        "mtp.layers.0.post_attention_layernorm.weight": np.array([2.0, 0.0], np.float32),
        "mtp.fc.weight": np.array([[0.5, 0.5]], np.float32),
    }
    tied = canonical_tensors(replace(ARCH, tie_word_embeddings=True), raw)
    expected = {
        "embed_tokens.weight": [[1.0, 2.0], [3.0, 4.0]],
        "lm_head.weight": [[1.0, 2.0], [3.0, 4.0]],  # tied: the embedding
        "norm.weight": [1.5, 0.75],
        "layers.0.linear_attn.decay_scale": [-1.0, -2.0],
        "layers.0.linear_attn.norm.weight": [0.9, 1.1],  # the gated norm is not offset form
        "layers.1.self_attn.q_norm.weight": [1.0, 2.0],
        "mtp.pre_fc_norm_hidden.weight": [0.0, 1.125],
        "mtp.layers.0.post_attention_layernorm.weight": [3.0, 1.0],
        "mtp.fc.weight": [[0.5, 0.5]],
    }
    assert sorted(tied) == sorted(expected)
    for name, want in expected.items():
        assert tied[name].dtype == np.float32, name
        np.testing.assert_allclose(tied[name], np.asarray(want, np.float32), rtol=1e-6, err_msg=name)
    assert "lm_head.weight" not in canonical_tensors(ARCH, raw)  # untied: only what the checkpoint stores


def test_hf_store_equals_seeded_store_tensor_by_tensor(tmp_path):
    # The two conversions are written apart (see above), so equality checks hf.py against this one.
    for arch in (ARCH, replace(ARCH, tie_word_embeddings=True)):
        directory = write_hf_checkpoint(tmp_path / str(arch.tie_word_embeddings), arch, seed=9, norm_weight_scale=0.2)
        ref = SourceRef("hf", str(directory))
        store = open_weights(ref, describe(ref))
        expected = seeded_store(arch, 9, 0.2)
        assert list(store.names()) == list(expected.names())
        for name in expected.names():
            got, want = store.read(name), expected.read(name)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            np.testing.assert_array_equal(got, want, err_msg=name)
