"""`inspect`, `check SPEC` and `plan` on a GLM-4.5-Air-shaped checkpoint read its headers, never a weight.

The checkpoint has GLM-4.5-Air's config.json (46 layers, the first dense, 128 experts, top-8, experts
1408 wide, one shared expert, hidden 4096, 96 heads of 128 over 8 KV heads, q/k/v biases, no qk-norm,
vocab 151552, one MTP layer) and, as the release is laid out, one safetensors shard per layer with a
header for every tensor it holds (experts one per expert, the MTP layer as `model.layers.46.*` with its
copies of the embedding and LM head, BF16) and no data: each shard is extended to its full size as a
sparse file (~220 GB in all). Reading any tensor's bytes fails the test.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from mtpc.cli.main import main
from mtpc.ir import Architecture, HeadLayout, LayerKind, MoeDims, Rope, TokenIds
from mtpc.ir.moe import SIGMOID
from mtpc.sources.hf.safetensors import SafetensorsFile
from mtpc.weights import canonical_shapes
from tests.fixtures.glm4moe_checkpoints import release_names
from tests.fixtures.safetensors_writer import write_sparse_safetensors
from tests.runtime.conftest import write_spec

AIR = Architecture(
    family="glm4moe", hidden_size=4096, intermediate_size=10944, num_attention_heads=96, num_key_value_heads=8,
    head_dim=128, vocab_size=151552, layer_kinds=(LayerKind.FULL_ATTENTION,) * 46, rms_norm_eps=1e-5,
    rope=Rope(1_000_000.0, 0.5, 128, position_rows=False), context_length=131072,
    tokens=TokenIds(151329, (151329, 151336, 151338), 151329), mtp_num_layers=1,
    moe=MoeDims(num_experts=128, top_k=8, expert_intermediate_size=1408, shared_expert_intermediate_size=1408,
                shared_expert_sigmoid_gate=False, scoring=SIGMOID, selection_bias=True, dense_layers=1),
    head_layout=HeadLayout.TRAILING_LAYER, attention_output_gate=False, attention_bias=True, qk_norm=False,
)
CONFIG = {
    "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "partial_rotary_factor": 0.5, "intermediate_size": 10944,
    "max_position_embeddings": 131072, "moe_intermediate_size": 1408, "norm_topk_prob": True,
    "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128, "n_shared_experts": 1,
    "routed_scaling_factor": 1.0, "num_experts_per_tok": 8, "first_k_dense_replace": 1, "num_hidden_layers": 46,
    "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 1000000, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_qk_norm": False,
    "vocab_size": 151552, "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338],
}


@pytest.fixture(scope="module")
def air(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("air") / "GLM-4.5-Air"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    shards: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
    for canonical, shape in canonical_shapes(AIR).items():
        for name, hf_shape in release_names(canonical, shape, AIR.num_layers):
            layer = name.split(".")[2] if name.startswith("model.layers.") else "rest"
            shards[layer][name] = hf_shape
    head = f"model.layers.{AIR.num_layers}."  # the release's copies of the embedding and LM head
    shards[str(AIR.num_layers)].update({head + "embed_tokens.weight": (151552, 4096),
                                        head + "shared_head.head.weight": (151552, 4096)})
    weight_map, total = {}, 0
    for i, (layer, shapes) in enumerate(sorted(shards.items())):
        filename = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_sparse_safetensors(folder / filename, shapes)
        weight_map.update({name: filename for name in shapes})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert 200e9 < total < 230e9  # 106B BF16 parameters and the head's copies, near enough
    return folder


@pytest.fixture
def no_weight_bytes(monkeypatch):
    def refuse(self):
        raise AssertionError(f"{self.path}: a weight's bytes were read")

    monkeypatch.setattr(SafetensorsFile, "_mapped", refuse)


def test_inspect_reads_no_weight(air, capsys, no_weight_bytes):
    assert main(["inspect", str(air)]) == 0
    out = capsys.readouterr().out
    assert "architecture:       glm4moe" in out
    assert ("experts:            128 experts, top-8 (sigmoid, selection bias, renormalized), expert FFN 1408, "
            "shared expert 1408; the first 1 layer(s) dense") in out
    assert "96 heads, 8 kv heads, head dim 128 (grouped-query attention, q/k/v bias, no qk-norm, rotary on 64 of 128" in out
    assert "mtp head:           yes, 1 layer(s), a trailing decoder layer (block 46, after the trunk)" in out


@pytest.mark.parametrize("verb", ["plan", "check"])
def test_plan_and_check_read_no_weight(air, tmp_path, capsys, no_weight_bytes, verb):
    spec = write_spec(tmp_path / "air.yaml", "air", f"{{hf: {air}}}", "quantization:\n  default: {bits: 4, block_size: 32}\n")
    code = main([verb, str(spec)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    if verb == "plan":
        assert out.startswith("model: glm4moe (hf source), 46 layers (46 full attention)\n"), out
        # 45 sparse trunk layers and the MTP layer, three expert stacks each, planned as QMoE blocks from headers.
        assert "138 experts float32 -> int4 QMoE block 32 accuracy 4 (lossy)" in out, out
        assert "  mtp head: 1 block, a trailing decoder layer (DeepSeek-V3 / GLM-4.5 layout)" in out
