"""deepseek2 GGUFs: the routing rule that holds at any size, and a file without its nextn layer.

llama.cpp's converter writes `expert_gating_func` only when config.json has `scoring_func`; without it llama.cpp's
runtime guesses sigmoid for 47 / 48 blocks and a 154880-token vocabulary, softmax otherwise. mtpc's rule
(sources/gguf/deepseek2.py): a selection bias (`exp_probs_b.bias`) means sigmoid scores with that bias
(`noaux_tc`) unless the key says otherwise; no bias means the key's scores, or softmax without it.
"""

from __future__ import annotations

import re

import pytest
from gguf import GGMLQuantizationType as QT, GGUFReader

from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf
from mtpc.util.diagnostics import SourceError
from tests.clients import llama_cpp
from tests.fixtures.gguf_requantize import requantize

from .conftest import LAYERS, write_release

GATING = "deepseek2.expert_gating_func"


def _moe(path):
    return gguf.describe(SourceRef("gguf", str(path))).architecture.moe


def _without_bias(ds_ggufs, target, **fields):
    names = tuple(t.name for t in GGUFReader(ds_ggufs["f32"]).tensors if t.name.endswith("exp_probs_b.bias"))
    assert len(names) == 2  # the sparse trunk block and the MTP block
    return requantize(ds_ggufs["f32"], target, (), QT.F32, omit=names, fields=fields)


def test_a_selection_bias_without_the_key_routes_by_sigmoid_at_any_size(ds_ggufs):
    """The converter's own file of a 3-block, 256-token model (llama.cpp's runtime would guess softmax here)."""
    assert GATING not in GGUFReader(ds_ggufs["f32"]).fields
    moe = _moe(ds_ggufs["f32"])
    assert (moe.scoring, moe.selection_bias, moe.routed_scaling_factor, moe.normalize_top_k) == ("sigmoid", True,
                                                                                                   pytest.approx(1.8), True)


def test_the_converter_writes_the_key_from_scoring_func_and_it_agrees(ds_workdir, ds_tensors):
    release = write_release(ds_workdir / "hf-scoring", ds_tensors, scoring_func="sigmoid")
    path = llama_cpp.convert(release, {"f32": ds_workdir / "ds-scoring.gguf"}, pre_tokenizer="glm4")["f32"]
    assert GGUFReader(path).fields[GATING].contents() == 2
    assert (_moe(path).scoring, _moe(path).selection_bias) == ("sigmoid", True)


def test_a_selection_bias_with_softmax_stated_is_refused_naming_the_key(ds_workdir, ds_ggufs):
    path = requantize(ds_ggufs["f32"], ds_workdir / "ds-softmax-bias.gguf", (), QT.F32, fields={GATING: 1})
    with pytest.raises(SourceError, match=f"{GATING}.*says softmax.*exp_probs_b"):
        _moe(path)


@pytest.mark.parametrize("stated, scoring", [(None, "softmax"), (1, "softmax"), (2, "sigmoid")])
def test_without_a_selection_bias_the_key_decides_and_softmax_is_the_default(ds_workdir, ds_ggufs, stated, scoring):
    path = _without_bias(ds_ggufs, ds_workdir / f"ds-no-bias-{stated}.gguf", **{GATING: stated})
    moe = _moe(path)
    assert (moe.scoring, moe.selection_bias) == (scoring, False)


def test_an_unknown_gating_function_is_refused_naming_the_key(ds_workdir, ds_ggufs):
    path = requantize(ds_ggufs["f32"], ds_workdir / "ds-gating-3.gguf", (), QT.F32, fields={GATING: 3})
    with pytest.raises(SourceError, match=f"{GATING}' is 3"):
        _moe(path)


def nextn_less(ds_ggufs, target):
    """An older GLM-4.7-Flash GGUF's form (block_count 47, no nextn key): the trunk only."""
    head = tuple(t.name for t in GGUFReader(ds_ggufs["f32"]).tensors if t.name.startswith(f"blk.{LAYERS}."))
    return requantize(ds_ggufs["f32"], target, (), QT.F32, omit=head,
                      fields={"deepseek2.block_count": LAYERS, "deepseek2.nextn_predict_layers": None})


def test_a_gguf_without_its_nextn_layer_reads_text_only(ds_workdir, ds_ggufs):
    info = gguf.describe(SourceRef("gguf", str(nextn_less(ds_ggufs, ds_workdir / "ds-no-nextn.gguf"))))
    arch = info.architecture
    assert (arch.mtp_num_layers, arch.unusable_head.absent, arch.num_layers) == (0, True, LAYERS)
    assert "which would add MTP" in arch.unusable_head.reason  # its head may be in a file of its own
    assert not any(t.name.startswith("mtp.") for t in info.tensors)


@pytest.mark.parametrize("fields, said", [
    ({"deepseek2.rope.scaling.type": "yarn"}, "deepseek2.rope.scaling.type' is 'yarn'"),  # DeepSeek-V3's rope
    ({"deepseek2.expert_group_count": 2, "deepseek2.expert_group_used_count": 1},
     "softmax routing over expert groups"),  # DeepSeek-V2's group_limited_greedy (no bias: softmax)
])
def test_what_mtpc_does_not_build_is_refused_naming_the_key(tmp_path, ds_ggufs, fields, said):
    target = tmp_path / "refused.gguf"
    path = _without_bias(ds_ggufs, target, **fields) if "group" in said else requantize(
        ds_ggufs["f32"], target, (), QT.F32, fields=fields)
    with pytest.raises(SourceError, match=re.escape(said)):
        gguf.describe(SourceRef("gguf", str(path)))
