"""Qwen3-Next's own traps, from its Hugging Face release (the conformance suite runs every shared oracle on it).

- `in_proj_qkvz` / `in_proj_ba` are interleaved per key-head group: the reader's split is held to
  transformers (which splits them with its own `fix_query_key_value_ordering`), and a reader that applies
  Qwen3.5's split order instead is caught by that very comparison, at value/key head ratios 1 and 2;
- the release's config.json declares no `mtp_num_hidden_layers`: the head's depth is its tensors';
- layers are sparse unless `mlp_only_layers` / `decoder_sparse_step` say otherwise (a leading run of
  dense layers is built; any other pattern is refused at its field).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mtpc.ir import SourceRef
from mtpc.reference.forward import DecoderReference
from mtpc.sources.hf import qwen3next, reader as hf
from mtpc.util.diagnostics import SourceError
from tests.clients import hf_transformers
from tests.fixtures.qwen3next_checkpoints import (
    PROMPTS,
    load_transformers,
    qwen3next_config,
    qwen3next_release_tensors,
    tiny_qwen3next_arch,
    write_qwen3next_checkpoint,
)

STEPS = 12


def _greedy_through_the_reader(folder, arch, prompt):
    ref = SourceRef("hf", str(folder))
    info = hf.describe(ref)
    return DecoderReference(arch, hf.open_weights(ref, info)).greedy(list(prompt), STEPS)


def _qwen35_split_order(fused: str, part: str, lin):
    """The wrong reading: Qwen3.5's separate projections concatenated ([q_all | k_all | v_all | z_all], [b | a])."""
    n = lin.num_value_heads if fused == "in_proj_ba" else 2 * lin.key_dim + lin.value_dim
    start = {"in_proj_qkv": 0, "in_proj_z": n, "in_proj_b": 0, "in_proj_a": n}[part]
    size = {"in_proj_qkv": n, "in_proj_z": lin.value_dim, "in_proj_b": n, "in_proj_a": n}[part]
    return np.arange(start, start + size)


@pytest.mark.parametrize("ratio", [1, 2])
def test_the_fused_projections_read_as_transformers_splits_them_and_a_wrong_order_is_caught(
    tmp_path, monkeypatch, ratio
):
    arch = tiny_qwen3next_arch(ratio=ratio)
    folder = write_qwen3next_checkpoint(tmp_path / "release", arch)
    model = load_transformers(folder)
    expected = {p: hf_transformers.greedy(model, list(p), STEPS) for p in PROMPTS}
    assert all(_greedy_through_the_reader(folder, arch, p) == expected[p] for p in PROMPTS)
    monkeypatch.setattr(qwen3next, "group_rows", _qwen35_split_order)
    hf._last_description = None
    assert any(_greedy_through_the_reader(folder, arch, p) != expected[p] for p in PROMPTS)


def test_the_heads_depth_comes_from_its_tensors(tmp_path):
    arch = tiny_qwen3next_arch()
    folder = write_qwen3next_checkpoint(tmp_path / "release", arch)
    assert "mtp_num_hidden_layers" not in json.loads((folder / "config.json").read_text())
    assert hf.describe(SourceRef("hf", str(folder))).architecture.mtp_num_layers == 1
    text_only = write_qwen3next_checkpoint(tmp_path / "text", arch, with_mtp=False)
    described = hf.describe(SourceRef("hf", str(text_only))).architecture
    assert (described.mtp_num_layers, described.unusable_head) == (0, None)


def test_a_half_present_head_is_named(tmp_path):
    arch = tiny_qwen3next_arch()
    tensors = {n: v for n, v in qwen3next_release_tensors(arch).items() if n != "mtp.pre_fc_norm_hidden.weight"}
    folder = write_qwen3next_checkpoint(tmp_path / "half", arch, tensors=tensors)
    unusable = hf.describe(SourceRef("hf", str(folder))).architecture.unusable_head
    assert unusable is not None and not unusable.absent and "mtp.pre_fc_norm_hidden.weight" in unusable.reason


def _with_config(tmp_path, **changes):
    arch = tiny_qwen3next_arch()
    folder = write_qwen3next_checkpoint(tmp_path / "ckpt", arch)
    config = {**qwen3next_config(arch), **changes}
    (folder / "config.json").write_text(json.dumps(config))
    return SourceRef("hf", str(folder))


def test_leading_dense_layers_decode_as_transformers(tmp_path):
    """`mlp_only_layers: [0]`: layer 0 a SwiGLU MLP (`intermediate_size`), the others sparse; the package decodes
    as transformers' own model of the release does."""
    from dataclasses import replace

    from tests.runtime import decoding
    from tests.runtime.conftest import compile_spec, write_spec

    base = tiny_qwen3next_arch()
    arch = replace(base, intermediate_size=48, moe=replace(base.moe, dense_layers=1))
    folder = write_qwen3next_checkpoint(tmp_path / "release", arch)
    assert json.loads((folder / "config.json").read_text())["mlp_only_layers"] == [0]
    moe = hf.describe(SourceRef("hf", str(folder))).architecture.moe
    assert moe is not None and moe.dense_layers == 1
    model = load_transformers(folder)
    package = compile_spec(write_spec(tmp_path / "dense.yaml", "dense", f"{{hf: {folder.name}}}"), tmp_path / "pkg")
    main_model = decoding.load(package)
    for prompt in PROMPTS:
        assert decoding.greedy(main_model, list(prompt), STEPS) == hf_transformers.greedy(model, list(prompt), STEPS)


@pytest.mark.parametrize("changes, field", [
    ({"mlp_only_layers": [1]}, "mlp_only_layers"),
    ({"decoder_sparse_step": 2}, "decoder_sparse_step"),
    ({"norm_topk_prob": False}, "norm_topk_prob"),
])
def test_a_sparse_pattern_mtpc_cannot_build_is_refused_at_its_field(tmp_path, changes, field):
    with pytest.raises(SourceError, match=f"field {field} "):
        hf.describe(_with_config(tmp_path, **changes))


def test_a_fused_projection_of_the_wrong_size_is_named(tmp_path):
    arch = tiny_qwen3next_arch()
    tensors = qwen3next_release_tensors(arch)
    name = "model.layers.0.linear_attn.in_proj_qkvz.weight"
    tensors[name] = tensors[name][:-1]
    folder = write_qwen3next_checkpoint(tmp_path / "short", arch, tensors=tensors)
    with pytest.raises(SourceError, match="in_proj_qkvz"):
        hf.describe(SourceRef("hf", str(folder)))
