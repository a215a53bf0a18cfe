"""A synthetic Qwen3.5-MoE source: seeded experts from the spec alone, and its mistakes at their position."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpc.cli.main import main
from mtpc.pipeline.driver import build
from mtpc.ir import MoeDims
from mtpc.spec.rules import synthetic_weight_count
from tests.fixtures.moe_checkpoints import tiny_moe_arch

ORT_CPU = 'targets:\n  onnxruntime_genai: {version: "0.18.0", execution_provider: cpu, attention: dense}\n'


def _spec(tmp_path: Path, synthetic: str, extra: str = "") -> Path:
    path = tmp_path / "moe.yaml"
    path.write_text(f"mtpc: 1\nname: syn-moe\nsource:\n  synthetic: {synthetic}\n{extra}{ORT_CPU}", encoding="utf-8")
    return path


@pytest.mark.parametrize("io_dtype", ["float32", "float16"])  # the CPU MoE kernel takes both
def test_synthetic_moe_compiles_and_verifies(tmp_path, capsys, io_dtype):
    spec = _spec(tmp_path, "{seed: 0, architecture: qwen35moe, moe: {num_experts: 8, top_k: 2}}",
                 f"precision: {{io_dtype: {io_dtype}}}\n")
    with build(spec) as built:
        arch = built.ir.architecture
        assert arch.family == "qwen35moe" and arch.moe == MoeDims(8, 2, 32, 64)
        # The defaults are the tiny MoE the checkpoint tests use.
        assert arch == tiny_moe_arch()
    assert main(["compile", str(spec), "-o", str(tmp_path / "pkg"), "-q"]) == 0
    assert main(["verify", str(tmp_path / "pkg"), "--spec", str(spec)]) == 0, capsys.readouterr()
    assert "verify: ok" in capsys.readouterr().out


@pytest.mark.parametrize(
    "synthetic, message",
    [
        ("{moe: {num_experts: 4}}", "moe.yaml:4:20: error: source.synthetic: moe sizes a sparse FFN, which only "
                                    "architecture: qwen35moe and glm4moe have"),
        ("{architecture: qwen35moe, moe: {num_experts: 2, top_k: 3}}",
         "moe.yaml:4:69: error: source.synthetic: top_k (3) must be at most num_experts (2)"),
    ],
)
def test_synthetic_moe_mistakes_are_reported_at_their_field(tmp_path, capsys, synthetic, message):
    assert main(["check", str(_spec(tmp_path, synthetic))]) == 1
    assert message in capsys.readouterr().out


def test_the_weight_bound_counts_the_experts():
    dense, moe = tiny_moe_arch(), tiny_moe_arch()
    dense = type(dense)(**{**dense.__dict__, "moe": None, "intermediate_size": 128})
    assert synthetic_weight_count(moe) > synthetic_weight_count(dense)
