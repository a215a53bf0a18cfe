"""Qwen3.5-MoE from Hugging Face checkpoints: what is the MoE family's own.

The shared oracles (greedy equals transformers, MTP equals greedy with the fitted head's counters, verify,
paged and onnx-genai packages) run in tests/conformance/ for every family. Here: the MoE op and model type,
a text-only package from transformers' own save_pretrained, per-expert and fused head layouts, missing
experts named, inspect's expert line.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from mtpc.cli.main import main
from mtpc.util.diagnostics import SourceError
from mtpc.ir import SourceRef
from mtpc.sources.hf import reader as hf
from tests.fixtures.fitted_head import PROMPTS
from tests.fixtures.moe_checkpoints import fitted_moe_store, write_moe_release_checkpoint, write_transformers_checkpoint
from tests.fixtures.safetensors_writer import write_safetensors
from tests.runtime import decoding
from mtpc.pipeline.driver import build
from tests.runtime.conftest import STEPS, compile_spec, files_of, write_spec




def test_the_package_uses_the_moe_op_and_model_type(moe_package):
    doc = json.loads((moe_package / "genai_config.json").read_text())
    assert doc["model"]["type"] == "qwen3_5_moe_text"
    for graph, layers in (("model.onnx", 4), ("mtp/mtp.onnx", 1)):
        nodes = onnx.load(str(moe_package / graph), load_external_data=False).graph.node
        moe = [n for n in nodes if n.op_type == "MoE"]
        assert len(moe) == layers, graph
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in moe[0].attribute}
        assert (attrs["k"], attrs["normalize_routing_weights"], attrs["swiglu_fusion"]) == (2, 1, 1)


def test_text_only_moe_from_transformers_save_pretrained(moe_workdir, moe_arch, moe_transformers_greedy):
    """A checkpoint transformers itself wrote, its head dropped: a MoE package with no trace of MTP."""
    folder = write_transformers_checkpoint(moe_workdir / "tf-text", moe_arch, with_mtp=False)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5MoeForCausalLM"] and "text_config" not in config
    assert config["mtp_num_hidden_layers"] == 1  # declared, the weights gone
    spec = write_spec(moe_workdir / "moe-text.yaml", "moe-text", f"{{hf: {folder.name}}}")
    with build(spec) as result:
        assert any("none of the head's tensors" in note for note in result.ir.notes), result.ir.notes
    package = compile_spec(spec, moe_workdir / "pkg-moe-text")
    files = files_of(package)
    assert not any("mtp" in name for name in files), sorted(files)
    assert b"mtp" not in files["genai_config.json"] and b"speculative" not in files["genai_config.json"]
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert "hidden_states" not in [o.name for o in graph.output]
    prompt = PROMPTS[0]
    assert decoding.greedy(decoding.load(package), list(prompt), STEPS) == moe_transformers_greedy[prompt]


def test_per_expert_and_fused_head_layouts_read_alike(moe_workdir, moe_arch, moe_release):
    """transformers' per-expert tensors (head included) and Qwen's fused head experts: one canonical model."""
    folder = write_transformers_checkpoint(moe_workdir / "tf-head", moe_arch, with_mtp=True)
    expected = fitted_moe_store(moe_arch)
    for source in (folder, moe_release):
        ref = SourceRef("hf", str(source))
        info = hf.describe(ref)
        assert info.architecture.moe == moe_arch.moe and info.architecture.mtp_num_layers == 1
        store = hf.open_weights(ref, info)
        assert sorted(store.names()) == sorted(expected.names())
        for name in expected.names():
            assert store.info(name).shape == expected.read(name).shape, name
            np.testing.assert_array_equal(store.read_float(name), expected.read_float(name), err_msg=name)


def test_a_missing_expert_is_named(tmp_path, moe_arch):
    from tests.fixtures.moe_checkpoints import fitted_moe_tensors

    folder = write_moe_release_checkpoint(tmp_path / "ckpt", moe_arch)
    tensors = {n: v for n, v in fitted_moe_tensors(moe_arch).items() if n != "model.language_model.layers.2.mlp.experts.5.up_proj.weight"}
    write_safetensors(folder / "model.safetensors", tensors, float_dtype="F32")
    with pytest.raises(SourceError, match=r"layers\.2\.mlp\.experts\.5\.up_proj\.weight"):
        hf.describe(SourceRef("hf", str(folder)))


def test_inspect_shows_experts_top_k_and_shared_expert(moe_release, capsys):
    assert main(["inspect", str(moe_release)]) == 0
    text = capsys.readouterr().out
    assert "architecture:       qwen35moe" in text
    assert "experts:            8 experts, top-2 (softmax, renormalized), expert FFN 32, shared expert 64 (sigmoid gate)" in text
    assert main(["inspect", "--format", "json", str(moe_release)]) == 0
    moe = json.loads(capsys.readouterr().out)["architecture"]["moe"]
    assert (moe["num_experts"], moe["top_k"], moe["shared_expert_intermediate_size"]) == (8, 2, 64)


def test_a_head_missing_its_expert_down_proj_is_incomplete(tmp_path, moe_arch):
    from tests.fixtures.moe_checkpoints import HEAD, fitted_moe_tensors, fuse_experts

    folder = write_moe_release_checkpoint(tmp_path / "ckpt", moe_arch)
    tensors = fuse_experts(fitted_moe_tensors(moe_arch), HEAD + "mlp.", 8)
    del tensors[HEAD + "mlp.experts.down_proj"]
    write_safetensors(folder / "model.safetensors", tensors, float_dtype="F32")
    unusable = hf.describe(SourceRef("hf", str(folder))).architecture.unusable_head
    assert unusable is not None and not unusable.absent
    assert "mtp.layers.0.mlp.experts.down_proj.weight" in unusable.reason


