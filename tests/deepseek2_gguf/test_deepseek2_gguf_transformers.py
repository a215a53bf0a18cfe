"""deepseek2 GGUFs of this folder's releases decode as transformers' own Glm4MoeLiteForCausalLM: with a q LoRA
(GLM-4.7-Flash's attention) and without one (`q_lora_rank` null: DeepSeek-V2-Lite's one `q_proj`, which the
converter writes as `attn_q` with no `q_lora_rank` key; llama.cpp's runtime loads such a file only for its
"lite" layer counts, mtpc reads it by the key's absence).

The oracle is transformers' greedy decoding on the release's own weights; the package is compiled from
llama.cpp's converter's f32 file of that release, so the rope rows' permutation and kv_b's reassembly are
checked end to end by a model mtpc did not write.
"""

from __future__ import annotations

import numpy as np
import pytest

from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf
from tests.clients import hf_transformers, llama_cpp
from tests.fixtures.glm4moe_checkpoints import fuse_experts
from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, write_spec

from .conftest import CONFIG, LAYERS, release_tensors, write_release

# Prompts whose 20-step continuations reach no special token and whose top two logits stay at least 0.02 apart
# at every step under either variant (measured with transformers): the CPU profile's float16 logits (a step of
# 0.004 near these magnitudes) cannot swap them. ([5, 6, 7, 8, 9, 10] has a 0.0012 near tie: og picks the other.)
PROMPTS = ([8, 29, 50, 49, 14, 96], [37, 8, 46, 63, 76, 84])
VARIANTS = {"q_lora": {}, "q_proj": {"q_lora_rank": None}}


def _transformers(config: dict, tensors: dict[str, np.ndarray]):
    import torch
    from transformers import Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM

    keys = ("architectures", "model_type", "first_k_dense_replace", "num_nextn_predict_layers", "torch_dtype")
    hf_config = Glm4MoeLiteConfig(**{k: v for k, v in config.items() if k not in keys})
    hf_config._attn_implementation = "eager"
    model = Glm4MoeLiteForCausalLM(hf_config).to(torch.float32).eval()
    trunk = {n: v for n, v in tensors.items() if not n.startswith(f"model.layers.{LAYERS}.")}
    state = fuse_experts(trunk, range(LAYERS), config["n_routed_experts"])
    model.load_state_dict({n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in state.items()}, strict=True)
    return model


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_converters_file_decodes_as_transformers(ds_workdir, variant):
    config = {**CONFIG, **VARIANTS[variant]}
    # larger weights than the reading tests' (0.1): logits far enough apart that float32 orderings agree
    tensors = {n: v * 4 for n, v in release_tensors(config=config).items()}
    release = write_release(ds_workdir / f"hf-{variant}", tensors, **VARIANTS[variant])
    path = llama_cpp.convert(release, {"f32": ds_workdir / f"ds-{variant}.gguf"}, pre_tokenizer="glm4")["f32"]
    arch = gguf.describe(SourceRef("gguf", str(path))).architecture
    assert (arch.mla.q_lora_rank, arch.mtp_num_layers) == (config["q_lora_rank"], 1)
    spec = write_spec(ds_workdir / f"ds-{variant}.yaml", f"ds-{variant}", f"{{gguf: {path.name}}}")
    package = compile_spec(spec, ds_workdir / f"pkg-ds-{variant}")
    model, head = decoding.load(package), decoding.load(package / "mtp")
    oracle = _transformers(config, tensors)
    for prompt in PROMPTS:
        tokens = decoding.greedy(model, prompt, STEPS)
        assert len(tokens) == STEPS, tokens  # no end-of-generation token reached: all 20 steps compared
        assert tokens == hf_transformers.greedy(oracle, prompt, STEPS), prompt
        assert decoding.speculative(model, head, prompt, STEPS, 2).tokens == tokens
