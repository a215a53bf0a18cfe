"""DeepSeek-V3's own HF traps, on the tiny release (`tests/fixtures/deepseek3_checkpoints.py`): what the
deepseek2 reader makes of its config (yarn and the softmax's mscale^2, the MTP layer kept) held to
transformers' own `DeepseekV3ForCausalLM`, its FP8 blocks read back exactly, and what it refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mtpc.ir import SourceRef
from mtpc.sources import describe, open_weights
from mtpc.util.diagnostics import SourceError
from tests.fixtures.deepseek3_checkpoints import (dsv3_store, dsv3_tensors, load_transformers_dsv3, tiny_dsv3_arch,
                                                  write_dsv3_checkpoint)

ARCH = tiny_dsv3_arch()


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_dsv3_checkpoint(tmp_path_factory.mktemp("dsv3") / "release", ARCH)


def ref(folder) -> SourceRef:
    return SourceRef("hf", str(folder))


def test_the_reader_makes_the_fixtures_architecture(release):
    info = describe(ref(release))
    assert info.architecture == ARCH
    assert info.has_mtp_head
    assert not any(t.name.endswith("_scale_inv") for t in info.tensors)


def test_softmax_scale_and_rope_are_transformers(release):
    """The softmax scale (qk_head_dim^-0.5 x mscale(40)^2) and the yarn tables as transformers' model holds them."""
    model = load_transformers_dsv3(ARCH, dsv3_tensors(ARCH))
    arch = describe(ref(release)).architecture
    assert arch.mla.softmax_scale == pytest.approx(model.model.layers[0].self_attn.scaling, rel=1e-12)
    assert arch.mla.softmax_scale > 1.8 * arch.mla.qk_head_dim ** -0.5  # the mscale is really there
    rotary = model.model.rotary_emb
    assert arch.rope.yarn.attention_factor == pytest.approx(rotary.attention_scaling)
    from mtpc.reference.yarn import inverse_frequencies

    np.testing.assert_allclose(inverse_frequencies(arch.rope.rotary_dim, arch.rope.theta, arch.rope.yarn),
                               rotary.inv_freq.numpy(), rtol=2e-7)


def test_fp8_release_reads_as_its_float_weights_exactly(release):
    """Every canonical weight, the FP8 ones dequantized and the rope rows of q_b_proj / kv_a_proj_with_mqa moved
    to half-split order after that, equals the fixture's own canonical store (derived apart from the reader)."""
    store = open_weights(ref(release), describe(ref(release)))
    expected = dsv3_store(ARCH)
    assert set(store.names()) >= set(expected.names())
    for name in expected.names():
        np.testing.assert_array_equal(np.asarray(store.read_float(name)), expected.read_float(name), err_msg=name)


def _edited(release, tmp_path, edit):
    folder = tmp_path / "edited"
    folder.mkdir()
    for path in release.iterdir():
        (folder / path.name).symlink_to(path)
    (folder / "config.json").unlink()
    config = json.loads((release / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["quantization_config"].__setitem__("quant_method", "gptq"),
     r"field quantization_config declares 'gptq' weights; mtpc reads float .* and FP8 blocks"),
    (lambda c: c["rope_scaling"].__setitem__("type", "llama3"),
     r"field rope_scaling.rope_type 'llama3' is not supported \(default or yarn RoPE\)"),
    (lambda c: c["rope_scaling"].pop("factor"), r"field rope_scaling.factor is missing \(required for yarn\)"),
    (lambda c: c.__setitem__("scoring_func", "softmax"), r"field scoring_func is 'softmax'"),
])
def test_config_traps_are_refused_naming_the_field(release, tmp_path, edit, message):
    with pytest.raises(SourceError, match=message):
        describe(ref(_edited(release, tmp_path, edit)))
