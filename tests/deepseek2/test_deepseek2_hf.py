"""GLM-4.7-Flash's own traps, from its Hugging Face release (the conformance suite runs every shared oracle on it).

- the rope rows are interleaved (no `rope_interleave` key means true): the reader's permutation to half-split
  is held to transformers' greedy tokens, and a reader without it is caught by that very comparison;
  `rope_interleave: false` reads the rows as they are, as transformers then does;
- `head_dim` is the rope dim, the latent norms use eps 1e-6 whatever `rms_norm_eps` says;
- `first_k_dense_replace` and `mlp_layer_types` are both read and must agree; a pattern that is not a leading
  run of dense layers, softmax routing, projection biases, RoPE scalings and quantizations other than
  DeepSeek-V3's (yarn, FP8 blocks: tests/deepseek3) are refused at their field;
- a model without a query LoRA (`q_lora_rank: null`, one `q_proj`) decodes as transformers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mtpc.ir import SourceRef
from mtpc.reference.forward import DecoderReference
from mtpc.sources.hf import deepseek2, reader as hf
from mtpc.util.diagnostics import SourceError
from tests.clients import hf_transformers
from tests.fixtures.deepseek2_checkpoints import (
    PROMPTS,
    SEED,
    fitted_mla_tensors,
    load_transformers_mla,
    mla_config,
    raw_mla_tensors,
    tiny_mla_arch,
    write_mla_checkpoint,
)

STEPS = 12


def _greedy_through_the_reader(folder, arch, prompt):
    ref = SourceRef("hf", str(folder))
    hf._last_description = None
    info = hf.describe(ref)
    return DecoderReference(info.architecture, hf.open_weights(ref, info)).greedy(list(prompt), STEPS)


def test_interleaved_rope_rows_read_as_transformers_rotates_them_and_a_reader_without_the_permutation_is_caught(
        tmp_path, monkeypatch):
    arch = tiny_mla_arch()
    tensors = fitted_mla_tensors(arch)
    folder = write_mla_checkpoint(tmp_path / "release", arch)
    assert "rope_interleave" not in json.loads((folder / "config.json").read_text())
    model = load_transformers_mla(arch, tensors)
    assert model.config.rope_interleave is True
    expected = {p: hf_transformers.greedy(model, list(p), STEPS) for p in PROMPTS}
    assert all(_greedy_through_the_reader(folder, arch, p) == expected[p] for p in PROMPTS)
    monkeypatch.setattr(deepseek2, "rope_rows", lambda canonical, heads, mla: None)  # the mutant: rows as stored
    assert any(_greedy_through_the_reader(folder, arch, p) != expected[p] for p in PROMPTS)


def test_rope_interleave_false_reads_the_rows_as_stored(tmp_path):
    arch = tiny_mla_arch()
    tensors = fitted_mla_tensors(arch)
    folder = write_mla_checkpoint(tmp_path / "release", arch, config=mla_config(arch, rope_interleave=False))
    model = load_transformers_mla(arch, tensors, rope_interleave=False)
    info = hf.describe(SourceRef("hf", str(folder)))
    assert info.architecture.mla.source_rope_interleaved is False
    for p in PROMPTS:
        assert _greedy_through_the_reader(folder, arch, p) == hf_transformers.greedy(model, list(p), STEPS)


def test_without_a_query_lora_the_package_decodes_as_transformers(tmp_path):
    """DeepSeek-V2-Lite's form: `q_lora_rank: null`, queries from one `q_proj` (its rope rows permuted per head)."""
    from tests.runtime import decoding
    from tests.runtime.conftest import compile_spec, write_spec

    arch = tiny_mla_arch(q_lora_rank=None)
    tensors = raw_mla_tensors(arch, SEED)
    assert any(n.endswith("self_attn.q_proj.weight") for n in tensors)
    folder = write_mla_checkpoint(tmp_path / "release", arch, tensors=tensors)
    model = load_transformers_mla(arch, tensors)
    package = compile_spec(write_spec(tmp_path / "q.yaml", "q", f"{{hf: {folder.name}}}"), tmp_path / "pkg")
    main_model = decoding.load(package)
    for p in PROMPTS:
        assert decoding.greedy(main_model, list(p), STEPS) == hf_transformers.greedy(model, list(p), STEPS)


def test_head_dim_is_the_rope_dim_and_the_latent_norms_have_their_own_eps(tmp_path):
    arch = tiny_mla_arch()
    folder = write_mla_checkpoint(tmp_path / "release", arch)
    config = json.loads((folder / "config.json").read_text())
    assert config["head_dim"] == 16 and config["rms_norm_eps"] == 1e-5
    read = hf.describe(SourceRef("hf", str(folder))).architecture
    mla = read.mla
    assert (read.head_dim, read.num_key_value_heads, read.rope.rotary_dim) == (48, 1, 16)
    assert (mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim, mla.kv_lora_rank, mla.q_lora_rank) == (
        16, 16, 24, 32, 48)
    assert (mla.latent_norm_eps, read.rms_norm_eps) == (1e-6, 1e-5)
    assert mla.softmax_scale == pytest.approx(32**-0.5)
    assert read.moe.dense_layers == 1 and read.moe.selection_bias and read.moe.routed_scaling_factor == 1.8


def _with_config(tmp_path, **changes):
    arch = tiny_mla_arch()
    folder = write_mla_checkpoint(tmp_path / "ckpt", arch, tokenizer=False)
    config = {k: v for k, v in {**mla_config(arch), **changes}.items() if v is not _DROP}
    (folder / "config.json").write_text(json.dumps(config))
    hf._last_description = None
    return SourceRef("hf", str(folder))


_DROP = object()


@pytest.mark.parametrize("changes, dense", [
    ({"mlp_layer_types": _DROP}, 1),
    ({"first_k_dense_replace": _DROP}, 1),
    ({"first_k_dense_replace": _DROP, "mlp_layer_types": _DROP}, 1),  # Glm4MoeLiteConfig's default
])
def test_dense_layers_from_either_key(tmp_path, changes, dense):
    assert hf.describe(_with_config(tmp_path, **changes)).architecture.moe.dense_layers == dense


@pytest.mark.parametrize("changes, field", [
    ({"first_k_dense_replace": 2}, "mlp_layer_types"),  # the two keys disagree
    ({"mlp_layer_types": ["dense", "sparse", "dense"]}, "mlp_layer_types"),
    ({"mlp_layer_types": ["dense", "sparse"]}, "mlp_layer_types"),
    ({"moe_layer_freq": 2}, "moe_layer_freq"),
    ({"scoring_func": "softmax"}, "scoring_func"),
    ({"topk_method": "greedy"}, "topk_method"),
    ({"attention_bias": True}, "attention_bias"),
    ({"qk_rope_head_dim": 15}, "qk_rope_head_dim"),
    ({"q_lora_rank": 0}, "q_lora_rank"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"rope_scaling": {"type": "longrope", "factor": 40}}, "rope_scaling.rope_type"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "quantization_config"),
])
def test_what_mtpc_cannot_build_is_refused_at_its_field(tmp_path, changes, field):
    with pytest.raises(SourceError, match=f"field {field} "):
        hf.describe(_with_config(tmp_path, **changes))


def test_a_kv_b_proj_of_the_wrong_size_is_named(tmp_path):
    arch = tiny_mla_arch()
    tensors = dict(fitted_mla_tensors(arch))
    name = "model.layers.1.self_attn.kv_b_proj.weight"
    tensors[name] = np.concatenate([tensors[name], tensors[name][:1]])
    folder = write_mla_checkpoint(tmp_path / "bad", arch, tensors=tensors, tokenizer=False)
    ref = SourceRef("hf", str(folder))
    hf._last_description = None
    with pytest.raises(SourceError, match=r"tensor layers\.1\.self_attn\.kv_b_proj\.weight has shape \[161, 32\]"):
        hf.open_weights(ref, hf.describe(ref))


def test_deepseek_v3s_config_keys_decode_as_transformers_deepseek_v3(tmp_path):
    """`DeepseekV3ForCausalLM` with the keys it shares with GLM-4.7-Flash (its `scoring_func`, `moe_layer_freq`, no
    `mlp_layer_types`; no yarn, no FP8): the package decodes as transformers' own DeepseekV3ForCausalLM."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from tests.fixtures.glm4moe_checkpoints import fuse_experts
    from tests.runtime import decoding
    from tests.runtime.conftest import compile_spec, write_spec

    arch = tiny_mla_arch()
    tensors = fitted_mla_tensors(arch)
    config = {k: v for k, v in mla_config(arch).items() if k != "mlp_layer_types"}
    config.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", scoring_func="sigmoid",
                  moe_layer_freq=1)
    folder = write_mla_checkpoint(tmp_path / "release", arch, config=config)
    transformers_keys = {k: v for k, v in config.items()
                         if k not in ("architectures", "model_type", "head_dim", "scoring_func", "topk_method",
                                      "moe_layer_freq")}
    tf_config = DeepseekV3Config(**transformers_keys)
    tf_config._attn_implementation = "eager"
    model = DeepseekV3ForCausalLM(tf_config).to(torch.float32).eval()
    trunk = {n: v for n, v in tensors.items() if not n.startswith(f"model.layers.{arch.num_layers}.")}
    state = fuse_experts(trunk, range(arch.num_layers), arch.moe.num_experts)
    model.load_state_dict({n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in state.items()}, strict=True)
    package = compile_spec(write_spec(tmp_path / "v3.yaml", "v3", f"{{hf: {folder.name}}}"), tmp_path / "pkg")
    main_model = decoding.load(package)
    for p in PROMPTS:
        assert decoding.greedy(main_model, list(p), STEPS) == hf_transformers.greedy(model, list(p), STEPS)
    assert hf.describe(SourceRef("hf", str(folder))).architecture.family == "deepseek2"


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
def test_a_half_precision_release_reads_as_the_fixtures_canonical_tensors(tmp_path, dtype):
    """The permuted rope rows come out of the half-precision store as every other tensor does: the stored values
    exactly (widened to float32), in half-split order (compared with the fixture's own derivation)."""
    from tests.fixtures.deepseek2_checkpoints import canonical_mla_tensors
    from tests.fixtures.safetensors_writer import write_safetensors

    arch = tiny_mla_arch()
    folder = write_mla_checkpoint(tmp_path / "release", arch, tokenizer=False)
    write_safetensors(folder / "model.safetensors", fitted_mla_tensors(arch), float_dtype=dtype)
    ref = SourceRef("hf", str(folder))
    hf._last_description = None
    store = hf.open_weights(ref, hf.describe(ref))
    stored = {n: _as_stored(v, dtype) for n, v in fitted_mla_tensors(arch).items()}
    expected = canonical_mla_tensors(arch, stored)
    for name in ("layers.1.self_attn.q_b_proj.weight", "layers.1.self_attn.kv_a_proj_with_mqa.weight",
                 "mtp.layers.0.self_attn.q_b_proj.weight", "layers.1.self_attn.kv_b_proj.weight"):
        np.testing.assert_array_equal(store.read_float(name), expected[name], err_msg=name)


def _as_stored(value: np.ndarray, dtype: str) -> np.ndarray:
    """`value` rounded as the writer stores it (BF16: round to nearest even on the upper 16 bits)."""
    if dtype == "F16":
        return value.astype(np.float16).astype(np.float32)
    bits = np.ascontiguousarray(value, np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)
