"""Nemotron-H's config traps, from its Hugging Face release (the conformance suite runs every shared oracle on it).

- The layout is `layers_block_type` (the releases' `mamba` / `attention` / `moe`, or transformers' own names) or
  the legacy `hybrid_override_pattern`; either reads as the same model.
- What mtpc does not build is refused at its field: a plain `mlp` layer (no release with an MTP head has one), a
  dt clamp other than the releases' [0, Infinity], a head other than attention then MoE, two shared experts
  (transformers and vLLM size them differently), groups that do not divide the heads.
- A release re-saved by transformers (which drops `mtp.*`) compiles text-only.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mtpc.ir import LayerKind, SourceRef
from mtpc.sources.hf import reader as hf
from mtpc.util.diagnostics import SourceError
from tests.fixtures.nemotron_h_checkpoints import nemotron_config, raw_nemotron_tensors, tiny_nemotron_arch, write_nemotron_checkpoint

ARCH = tiny_nemotron_arch()


def _describe(tmp_path, with_mtp: bool = True, **config):
    folder = write_nemotron_checkpoint(tmp_path / "release", ARCH, tensors=raw_nemotron_tensors(ARCH), with_mtp=with_mtp,
                                       config=nemotron_config(ARCH, **config))
    return hf.describe(SourceRef("hf", str(folder)))


@pytest.mark.parametrize("layout", [
    {"layers_block_type": ["mamba", "moe", "attention", "moe", "mamba", "moe"]},
    {"layers_block_type": ["linear_attention", "moe", "full_attention", "moe", "linear_attention", "moe"]},
    {"layers_block_type": None, "hybrid_override_pattern": "ME*EME", "mtp_layers_block_type": None,
     "mtp_hybrid_override_pattern": "*E"},
])
def test_every_spelling_of_the_layout_reads_as_the_same_model(tmp_path, layout):
    arch = _describe(tmp_path, **layout).architecture
    assert arch == ARCH
    assert arch.layer_kinds == (LayerKind.MAMBA2, LayerKind.FEED_FORWARD, LayerKind.FULL_ATTENTION,
                                LayerKind.FEED_FORWARD, LayerKind.MAMBA2, LayerKind.FEED_FORWARD)


@pytest.mark.parametrize("change, field, words", [
    ({"layers_block_type": ["mamba", "mlp", "attention", "moe", "mamba", "moe"]}, "layers_block_type", "plain MLP"),
    ({"time_step_limit": [0.001, float("inf")]}, "time_step_limit", "does not clamp"),
    ({"mtp_layers_block_type": ["attention", "moe", "moe"]}, "mtp_layers_block_type", "attention sub-block then a MoE"),
    ({"n_shared_experts": 2}, "n_shared_experts", "must be 1"),
    ({"n_groups": 3}, "n_groups", "must divide mamba_num_heads"),
    ({"mlp_hidden_act": "silu"}, "mlp_hidden_act", "'relu2'"),
])
def test_what_mtpc_does_not_build_is_refused_at_its_field(tmp_path, change, field, words):
    with pytest.raises(SourceError, match=f"config.json: field {field} .*{words}"):
        _describe(tmp_path, **change)


def test_a_release_resaved_without_its_head_is_text_only(tmp_path):
    arch = _describe(tmp_path, with_mtp=False).architecture
    assert arch.mtp_num_layers == 0 and arch.unusable_head is not None and arch.unusable_head.absent


def test_the_readers_weights_are_the_fixtures_canonical_ones(tmp_path):
    from tests.fixtures.nemotron_h_checkpoints import canonical_nemotron_tensors

    folder = write_nemotron_checkpoint(tmp_path / "release", ARCH, tensors=raw_nemotron_tensors(ARCH))
    ref = SourceRef("hf", str(folder))
    store = hf.open_weights(ref, hf.describe(ref))
    expected = canonical_nemotron_tensors(ARCH, raw_nemotron_tensors(ARCH))
    assert sorted(store.names()) == sorted(expected)
    for name, value in expected.items():
        # exact but for -exp(A_log), a unit in the last place between float32 and float64 exponentials
        np.testing.assert_allclose(store.read_float(name), np.asarray(value, np.float32), rtol=1e-6, atol=0, err_msg=name)
    config = json.loads((folder / "config.json").read_text())
    assert config["time_step_limit"] == [0.0, float("inf")]  # written as the releases write it (Infinity)
