"""A synthetic GLM-4.5 source: the graphs compute GLM's routing exactly, in each of its variants, and the spec's
GLM settings are refused where they mean nothing.

The routing variants are the ones transformers' `Glm4MoeTopkRouter` has: group-limited or not, the
top-k weights renormalized (the op's own renormalization over the chosen experts) or not (the graph
multiplies the op's output by the sum of the chosen scores), scaled or not. Each package's main graph
is run on onnxruntime and its post-norm hidden states held to the numpy reference (`reference/moe.py`,
written from transformers' router) within 2e-5, well below what a wrong choice or weight would move.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mtpc.cli.main import main
from mtpc.pipeline.driver import build
from mtpc.reference.forward import DecoderReference
from mtpc.sources.random_weights_glm4moe import seeded_glm4moe_store
from tests.graphs.tiny import empty_state, run, session

ORT_CPU = 'targets:\n  onnxruntime_genai: {version: "0.18.0", execution_provider: cpu, attention: dense}\n'
GLM = "architecture: glm4moe, num_layers: 3, head_dim: 32, rope: {partial_rotary_factor: 0.5}"


def _spec(tmp_path: Path, synthetic: str, extra: str = "") -> Path:
    path = tmp_path / "glm.yaml"
    path.write_text(f"mtpc: 1\nname: syn-glm\nsource:\n  synthetic: {synthetic}\n{extra}{ORT_CPU}", encoding="utf-8")
    return path


def _hidden_states(package: Path, ids: list[int]) -> np.ndarray:
    sess = session(package / "model.onnx")
    s = len(ids)
    feeds = {"input_ids": np.asarray([ids], np.int64), "attention_mask": np.ones((1, s), np.int64),
             "position_ids": np.arange(s, dtype=np.int64)[None], **empty_state(sess, 1)}
    return run(sess, feeds)["hidden_states"]


@pytest.mark.parametrize("moe", [
    "{num_groups: 4, top_k_groups: 2, routed_scaling_factor: 2.5, dense_layers: 1}",
    "{num_groups: 4, top_k_groups: 1, normalize_top_k: false, dense_layers: 2}",
    "{num_experts: 16, top_k: 4, normalize_top_k: false, routed_scaling_factor: 1.5}",
])
def test_the_graph_routes_as_transformers_does(tmp_path, moe):
    spec = _spec(tmp_path, f"{{seed: 3, {GLM}, attention_bias: true, moe: {moe}}}")
    with build(spec) as built:
        arch = built.ir.architecture
    assert main(["compile", str(spec), "-o", str(tmp_path / "pkg"), "-q"]) == 0
    ids = [5, 77, 130, 9, 201, 64, 33, 18]
    _, expected, _, _ = DecoderReference(arch, seeded_glm4moe_store(arch, 3)).forward(np.asarray([ids]))
    got = _hidden_states(tmp_path / "pkg", ids)
    assert np.abs(got - expected).max() < 2e-5, np.abs(got - expected).max()


def test_a_float16_package_verifies(tmp_path, capsys):
    spec = _spec(tmp_path, f"{{seed: 0, {GLM}, qk_norm: true, moe: {{num_groups: 2, top_k_groups: 1}}}}",
                 "precision: {io_dtype: float16}\n")
    assert main(["compile", str(spec), "-o", str(tmp_path / "pkg"), "-q"]) == 0
    assert main(["verify", str(tmp_path / "pkg"), "--spec", str(spec)]) == 0, capsys.readouterr()


@pytest.mark.parametrize("synthetic, message", [
    ("{architecture: qwen35moe, moe: {num_groups: 2}}",
     "glm.yaml:4:58: error: source.synthetic: moe.num_groups is a GLM-4.5 routing setting (architecture: glm4moe)"),
    ("{qk_norm: true}", "error: source.synthetic: qk_norm is a GLM-4.5 setting"),
    ("{architecture: glm4moe, full_attention_interval: 2}",
     "error: source.synthetic: full_attention_interval sizes Qwen3.5's linear-attention layers; architecture: "
     "glm4moe has none"),
    ("{architecture: glm4moe, rope: {mrope_section: [4, 2, 2]}}", "mrope_section is Qwen3.5's MRoPE"),
    ("{architecture: glm4moe, moe: {num_experts: 8, num_groups: 3}}",
     "error: source.synthetic: num_groups (3) must divide num_experts (8)"),
    ("{architecture: glm4moe, moe: {num_groups: 4, top_k_groups: 1, top_k: 3}}",
     "error: source.synthetic: top_k (3) must be at most the experts of top_k_groups groups (1 x 2)"),
    ("{architecture: glm4moe, num_layers: 2, moe: {dense_layers: 3}}",
     "error: source.synthetic: dense_layers (3) must be at most num_layers (2)"),
])
def test_glm_settings_are_checked_at_their_field(tmp_path, capsys, synthetic, message):
    assert main(["check", str(_spec(tmp_path, synthetic))]) == 1
    assert message in capsys.readouterr().out
