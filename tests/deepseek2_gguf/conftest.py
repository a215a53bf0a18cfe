"""A tiny GLM-4.7-Flash (`Glm4MoeLiteForCausalLM`) release and llama.cpp's own converter's GGUFs of it.

The tensor names and shapes are transformers' own (`Glm4MoeLiteForCausalLM(config).state_dict()`), the
values seeded; the MTP layer `model.layers.{L}.*` (transformers drops it on load) is appended as GLM-4.5's
fixture does: a full decoder layer and `eh_proj`, `enorm`, `hnorm`, `shared_head.norm`. Every MLA size differs
from the others (kv LoRA 64, q LoRA 96, nope 32, rope 16, value 32), so a size read from the wrong key shows.
Its config.json has no `scoring_func`, as the release's: the converter writes no `expert_gating_func`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.clients import llama_cpp
from tests.fixtures.glm4moe_checkpoints import glm_tokenizer_files, tiny_glm_arch
from tests.fixtures.safetensors_writer import write_safetensors

LAYERS = 2  # the trunk; the MTP layer is model.layers.2
CONFIG = {
    "architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite", "vocab_size": 256,
    "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": LAYERS,
    "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 8,
    "routed_scaling_factor": 1.8, "kv_lora_rank": 64, "q_lora_rank": 96, "qk_rope_head_dim": 16, "v_head_dim": 32,
    "qk_nope_head_dim": 32, "n_group": 1, "topk_group": 1, "num_experts_per_tok": 2, "norm_topk_prob": True,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    "tie_word_embeddings": False, "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"},
    "mlp_layer_types": ["dense", "sparse"], "first_k_dense_replace": 1, "num_nextn_predict_layers": 1,
    "torch_dtype": "float32",
}


# Every matrix but attn_k_b (rows of qk_nope_head_dim) 256 wide: rows a k-quant can block.
WIDE = {**CONFIG, "hidden_size": 256, "intermediate_size": 256, "moe_intermediate_size": 256, "q_lora_rank": 256,
        "kv_lora_rank": 256, "qk_rope_head_dim": 32, "v_head_dim": 64}


def release_tensors(with_mtp: bool = True, config: dict = CONFIG) -> dict[str, np.ndarray]:
    """transformers' names and shapes, experts one tensor per expert (the release's layout), seeded values."""
    import torch
    from transformers import Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM

    keys = ("architectures", "model_type", "first_k_dense_replace", "num_nextn_predict_layers", "torch_dtype")
    with torch.device("meta"):
        model = Glm4MoeLiteForCausalLM(Glm4MoeLiteConfig(**{k: v for k, v in config.items() if k not in keys}))
    shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    inter = config["moe_intermediate_size"]
    split: dict[str, tuple[int, ...]] = {}
    for name, shape in shapes.items():
        owner, _, proj = name.rpartition("mlp.experts.")
        if not owner:
            split[name] = shape
            continue
        for e in range(shape[0]):  # fused gate_up_proj [E, 2I, H] = [gate | up]; down_proj [E, H, I]
            if proj == "gate_up_proj":
                split[f"{owner}mlp.experts.{e}.gate_proj.weight"] = (inter, shape[2])
                split[f"{owner}mlp.experts.{e}.up_proj.weight"] = (inter, shape[2])
            else:
                split[f"{owner}mlp.experts.{e}.down_proj.weight"] = shape[1:]
    if with_mtp:
        last, head = f"model.layers.{LAYERS - 1}.", f"model.layers.{LAYERS}."
        split.update({n.replace(last, head): s for n, s in split.items() if n.startswith(last)})
        h = config["hidden_size"]
        split.update({head + "eh_proj.weight": (h, 2 * h), head + "enorm.weight": (h,), head + "hnorm.weight": (h,),
                      head + "shared_head.norm.weight": (h,)})
    rng = np.random.default_rng(29)
    return {n: (rng.standard_normal(s) * 0.1).astype(np.float32) for n, s in sorted(split.items())}


def write_release(folder: Path, tensors: dict[str, np.ndarray], **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**CONFIG, **config}, indent=2, sort_keys=True))
    write_safetensors(folder / "model.safetensors", tensors, float_dtype="F32")
    # GLM's special tokens by name (the converter's `_set_vocab_glm` looks them up) over a 256-token vocabulary
    for relpath, content in glm_tokenizer_files(tiny_glm_arch()):
        (folder / relpath).write_bytes(content)
    return folder


@pytest.fixture(scope="session")
def ds_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("deepseek2_gguf")


@pytest.fixture(scope="session")
def ds_tensors() -> dict[str, np.ndarray]:
    return release_tensors()


@pytest.fixture(scope="session")
def ds_ggufs(ds_workdir, ds_tensors) -> dict[str, Path]:
    """{outtype: the converter's GGUF} for f32 and q8_0."""
    try:
        llama_cpp.converter_tree()
    except llama_cpp.ConverterUnavailable as error:  # fail, never skip: without it nothing here is tested
        pytest.fail(f"llama.cpp's converter is needed and could not be had: {error}", pytrace=False)
    release = write_release(ds_workdir / "hf", ds_tensors)
    outputs = {t: ds_workdir / f"ds-{t}.gguf" for t in ("f32", "q8_0")}
    return llama_cpp.convert(release, outputs, pre_tokenizer="glm4")


@pytest.fixture(scope="session")
def wide_gguf(ds_workdir) -> Path:
    """The converter's f32 file of the `WIDE` release."""
    release = write_release(ds_workdir / "hf-wide", release_tensors(config=WIDE), **WIDE)
    return llama_cpp.convert(release, {"f32": ds_workdir / "ds-wide-f32.gguf"}, pre_tokenizer="glm4")["f32"]
