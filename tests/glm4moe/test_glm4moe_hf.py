"""GLM-4.5 from Hugging Face checkpoints: what is GLM's own.

The checkpoint is the tiny `Glm4MoeForCausalLM` (tests.fixtures.glm4moe_checkpoints): a dense first
layer, then sparse layers with 8 experts in 4 groups (2 kept), top-2, a nonzero selection bias, a
scaling factor and a shared expert, q/k/v biases, qk-norm on and off, and its MTP layer appended as
`model.layers.3.*` and fitted to the trunk's greedy continuations. The shared oracles run on it in
tests/conformance/; here: the reference against transformers' logits, the routing it exercises, the
variant without qk-norm decoded as transformers under MTP, expert layouts, optional head copies, text-only
and half-present heads, inspect / plan / card.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
import torch

from mtpc.cli.main import main
from mtpc.ir import SourceRef
from mtpc.pipeline.driver import build
from mtpc.reference.moe import route
from mtpc.sources.hf import reader as hf
from tests.fixtures.glm4moe_checkpoints import (
    PROMPTS,
    fitted_glm_store,
    fitted_glm_tensors,
    load_transformers_glm,
    write_glm_checkpoint,
)
from tests.runtime.decoding import check_speculative
from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, files_of, write_spec

from .conftest import QK_NORM, arch_of

VARIANTS = sorted(QK_NORM)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_numpy_reference_matches_transformers_logits(references, variant):
    arch = arch_of(variant)
    model = load_transformers_glm(arch, fitted_glm_tensors(arch))
    reference, _ = references[variant]
    ids = [*PROMPTS[0], *PROMPTS[1], *PROMPTS[0]]
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([ids]), use_cache=False).logits.numpy()
    logits, *_ = reference.forward(np.asarray([ids]))
    assert np.abs(logits - expected).max() < 2e-5, np.abs(logits - expected).max()


def test_the_tiny_model_exercises_bias_and_group_routing(glm_arch, references):
    """Without the selection bias, or without the group limit, other experts would be chosen for some tokens:
    the model's routing depends on both, so the tests decoding it check both."""
    reference, _ = references["qk_norm"]
    weights = reference.w
    x = weights["embed_tokens.weight"][list(PROMPTS[0] + PROMPTS[1])]
    logits = x @ weights["layers.1.mlp.gate.weight"].T
    bias = weights["layers.1.mlp.gate.e_score_correction_bias"]
    moe = glm_arch.moe
    chosen = {tuple(sorted(t)) for t in route(logits, moe, bias)[0]}
    unbiased = {tuple(sorted(t)) for t in route(logits, moe, None)[0]}
    ungrouped = {tuple(sorted(t)) for t in route(logits, replace(moe, num_groups=1, top_k_groups=1), bias)[0]}
    assert chosen != unbiased and chosen != ungrouped


def test_the_package_runs_moe_on_the_chosen_experts(glm_packages):
    package = glm_packages["qk_norm"]
    doc = json.loads((package / "genai_config.json").read_text())
    assert doc["model"]["type"] == "llama"
    for graph, layers in (("model.onnx", 2), ("mtp/mtp.onnx", 1)):  # layer 0 is dense
        nodes = onnx.load(str(package / graph), load_external_data=False).graph.node
        moe = [n for n in nodes if n.op_type == "MoE"]
        assert len(moe) == layers, graph
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in moe[0].attribute}
        assert (attrs["k"], attrs["normalize_routing_weights"], attrs["swiglu_fusion"]) == (2, 1, 1)
        assert sum(n.op_type == "ScatterElements" for n in nodes) == 2 * layers  # group marks, chosen experts


@pytest.mark.parametrize("max_draft", [2, 3])
def test_mtp_decoding_without_qk_norm(glm_models, transformers_greedy, references, max_draft):
    prompt = PROMPTS[1]
    check_speculative(glm_models["no_qk_norm"], transformers_greedy["no_qk_norm"][prompt], *references["no_qk_norm"],
                      prompt, max_draft)


def test_per_expert_and_fused_experts_read_alike(glm_workdir, glm_arch, glm_checkpoints):
    fused = write_glm_checkpoint(glm_workdir / "hf-fused", glm_arch, fused=True)
    expected = fitted_glm_store(glm_arch)
    for folder in (glm_checkpoints["qk_norm"], fused):
        ref = SourceRef("hf", str(folder))
        info = hf.describe(ref)
        assert info.architecture == glm_arch and info.architecture.mtp_num_layers == 1
        store = hf.open_weights(ref, info)
        assert sorted(store.names()) == sorted(expected.names())
        for name in expected.names():
            np.testing.assert_array_equal(store.read_float(name), expected.read_float(name), err_msg=name)


def test_the_head_copies_of_embedding_and_lm_head_are_optional(glm_workdir, glm_arch):
    """GLM-4.5 stores `embed_tokens` / `shared_head.head` in its MTP layer, GLM-4.6 does not: both build the head."""
    tensors = fitted_glm_tensors(glm_arch)
    head = f"model.layers.{glm_arch.num_layers}."
    tensors = {**tensors, head + "embed_tokens.weight": tensors["model.embed_tokens.weight"],
               head + "shared_head.head.weight": tensors["lm_head.weight"]}
    folder = write_glm_checkpoint(glm_workdir / "hf-with-copies", glm_arch, tensors=tensors)
    info = hf.describe(SourceRef("hf", str(folder)))
    assert info.architecture.mtp_num_layers == 1 and info.architecture.unusable_head is None


def test_text_only_when_the_mtp_layer_is_absent(glm_workdir, glm_arch, transformers_greedy):
    """config.json declares one MTP layer but the weights hold none (as transformers re-saves GLM): text only."""
    folder = write_glm_checkpoint(glm_workdir / "hf-text", glm_arch, with_mtp=False, tokenizer=True)
    spec = write_spec(glm_workdir / "glm-text.yaml", "glm-text", f"{{hf: {folder.name}}}")
    with build(spec) as result:
        assert any("none of the head's tensors" in note for note in result.ir.notes), result.ir.notes
    package = compile_spec(spec, glm_workdir / "pkg-glm-text")
    files = files_of(package)
    assert not any("mtp" in name for name in files), sorted(files)
    assert b"speculative" not in files["genai_config.json"]
    prompt = PROMPTS[0]
    assert decoding.greedy(decoding.load(package), list(prompt), STEPS) == transformers_greedy["qk_norm"][prompt]


def test_a_half_present_mtp_layer_is_refused_naming_what_is_missing(glm_workdir, glm_arch, capsys):
    tensors = fitted_glm_tensors(glm_arch)
    head = f"model.layers.{glm_arch.num_layers}."
    del tensors[head + "eh_proj.weight"], tensors[head + "mlp.gate.e_score_correction_bias"]
    folder = write_glm_checkpoint(glm_workdir / "hf-half", glm_arch, tensors=tensors)
    unusable = hf.describe(SourceRef("hf", str(folder))).architecture.unusable_head
    assert unusable is not None and not unusable.absent
    assert "2 of its" in unusable.reason
    assert "model.layers.3.eh_proj.weight" in unusable.reason
    assert "model.layers.3.mlp.gate.e_score_correction_bias" in unusable.reason
    spec = write_spec(glm_workdir / "glm-half.yaml", "glm-half", f"{{hf: {folder.name}}}")
    assert main(["check", str(spec)]) == 1
    assert "model.layers.3.eh_proj.weight" in capsys.readouterr().out


def test_inspect_and_plan_name_the_family_routing_and_head(glm_workdir, glm_checkpoints, capsys):
    folder = glm_checkpoints["qk_norm"]
    assert main(["inspect", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "architecture:       glm4moe" in text
    assert ("experts:            8 experts, top-2 (sigmoid, selection bias, top-2 of 4 groups, renormalized, "
            "scaled by 2.5), expert FFN 32, shared expert 32; the first 1 layer(s) dense") in text
    assert "grouped-query attention, q/k/v bias, qk-norm, rotary on 16 of 32 channels" in text
    assert "mtp head:           yes, 1 layer(s), a trailing decoder layer (block 3, after the trunk)" in text
    spec = write_spec(glm_workdir / "glm-plan.yaml", "glm-plan", f"{{hf: {folder.name}}}")
    assert main(["plan", str(spec), "--against", str(glm_workdir / "nowhere")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model: glm4moe (hf source), 3 layers (3 full attention)\n"), out
    assert "  mtp head: 1 block, a trailing decoder layer (DeepSeek-V3 / GLM-4.5 layout)" in out


def test_the_model_card_names_the_family_and_head(glm_packages):
    card = (glm_packages["qk_norm"] / "README.md").read_text()
    assert "- glm4moe" in card and "from a glm4moe checkpoint (hf source)" in card
    assert "- mixture of experts: 8 experts, top-2 (sigmoid, selection bias" in card
    assert "- MTP head in the source: 1 block, a trailing decoder layer (DeepSeek-V3 / GLM-4.5 layout)" in card
