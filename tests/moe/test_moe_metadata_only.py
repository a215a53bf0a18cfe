"""`plan` and `check SPEC` on a Qwen3.5-35B-A3B-shaped checkpoint read its headers, never a weight.

The checkpoint has 35B-A3B's config (40 layers, 256 experts, top-8, experts 512 wide, shared expert
512, hidden 2048, vocab 248320, one MTP block) and a safetensors header for every tensor it holds
(one per expert in the trunk, the head's experts fused, BF16), but no data: the file is extended
to its full ~70 GB as a sparse file. Reading any tensor's bytes fails the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtpc.cli.main import main
from mtpc.ir import LayerKind, LinearAttentionDims, MoeDims, Rope, TokenIds, Architecture
from mtpc.sources.hf.safetensors import SafetensorsFile
from mtpc.weights import canonical_shapes
from tests.fixtures.moe_checkpoints import hf_expert_names
from tests.fixtures.safetensors_writer import write_sparse_safetensors
from tests.runtime.conftest import write_spec

A3B = Architecture(
    family="qwen35moe", hidden_size=2048, intermediate_size=512, num_attention_heads=16, num_key_value_heads=2,
    head_dim=256, vocab_size=248320,
    layer_kinds=tuple(LayerKind.FULL_ATTENTION if (i + 1) % 4 == 0 else LayerKind.LINEAR_ATTENTION for i in range(40)),
    rms_norm_eps=1e-6, rope=Rope(10_000_000.0, 0.25, 256, (11, 11, 10)), context_length=262144,
    tokens=TokenIds(248044, (248046,), 248044),
    linear_attention=LinearAttentionDims(16, 128, 32, 128, 4), mtp_num_layers=1,
    moe=MoeDims(num_experts=256, top_k=8, expert_intermediate_size=512, shared_expert_intermediate_size=512),
)


@pytest.fixture(scope="module")
def a3b(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("a3b") / "Qwen3.5-35B-A3B"
    folder.mkdir()
    moe = A3B.moe
    text = {
        "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320, "rms_norm_eps": 1e-6,
        "layer_types": [k.value for k in A3B.layer_kinds], "full_attention_interval": 4, "attn_output_gate": True,
        "max_position_embeddings": 262144, "mtp_num_hidden_layers": 1, "num_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
        "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "eos_token_id": 248046,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    }
    config = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
              "text_config": text, "tie_word_embeddings": False}
    (folder / "config.json").write_text(json.dumps(config))
    shapes = dict(hf for canonical, shape in canonical_shapes(A3B).items()
                  for hf in hf_expert_names(canonical, shape, fused=canonical.startswith("mtp.")))
    offset = write_sparse_safetensors(folder / "model.safetensors", shapes)
    assert offset > 60e9  # 35B BF16 parameters, near enough
    return folder


@pytest.fixture
def no_weight_bytes(monkeypatch):
    def refuse(self):
        raise AssertionError(f"{self.path}: a weight's bytes were read")

    monkeypatch.setattr(SafetensorsFile, "_mapped", refuse)


@pytest.mark.parametrize("verb", ["plan", "check"])
def test_plan_and_check_read_no_weight(a3b, tmp_path, capsys, no_weight_bytes, verb):
    spec = write_spec(tmp_path / "a3b.yaml", "a3b", f"{{hf: {a3b}}}", "quantization:\n  default: {bits: 4, block_size: 32}\n")
    code = main([verb, str(spec)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    if verb == "plan":
        # 40 trunk layers and the head, three expert stacks each, planned as QMoE blocks from headers alone.
        assert "123 experts float32 -> int4 QMoE block 32 accuracy 4 (lossy)" in out, out


def test_inspect_reads_no_weight(a3b, capsys, no_weight_bytes):
    assert main(["inspect", str(a3b)]) == 0
    out = capsys.readouterr().out
    assert "256 experts, top-8 (softmax, renormalized), expert FFN 512, shared expert 512 (sigmoid gate)" in out
    assert "mtp head:           yes, 1 layer(s)" in out
