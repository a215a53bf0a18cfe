"""DeepSeek-V3's MTP layer (`model.layers.{L}.*`, kept on read) against a torch rendition built from transformers'
own `DeepseekV3` modules: transformers 5.18 has no MTP model for DeepSeek-V3 (it drops the layer on load), so
the rendition is the MTP module of DeepSeek-V3's report (embed, enorm / hnorm, eh_proj, one decoder layer,
shared_head.norm, the trunk's LM head) around transformers' `DeepseekV3DecoderLayer`, with yarn RoPE and its
softmax mscale. The head is not the fitted one (its attention and experts all contribute), its projections
FP8 blocks (eh_proj included, as the release stores it): the package's `mtp.onnx` on onnxruntime must compute
what the rendition does on the dequantized weights, prefill and a draft step over its own cache."""

from __future__ import annotations

import numpy as np

from tests.fixtures.torch_trailing_head import GraphSession, assert_head_graph_matches, torch_trailing_head
from tests.fixtures.deepseek2_checkpoints import PREFIX, raw_mla_tensors
from tests.fixtures.deepseek3_checkpoints import (
    PROMPTS, SEED, as_meant, tiny_dsv3_arch, transformers_dsv3_config, write_dsv3_checkpoint,
)
from tests.runtime.conftest import compile_spec, write_spec


def _torch_head(arch, tensors):
    """The MTP layer from transformers' own modules (`DeepseekV3DecoderLayer` holding `model.layers.{L}.*`)."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

    return torch_trailing_head(arch, tensors, transformers_dsv3_config(arch), PREFIX, m.DeepseekV3DecoderLayer,
                               m.DeepseekV3RMSNorm, m.DeepseekV3RotaryEmbedding)


def test_the_mtp_layer_computes_what_transformers_modules_do(tmp_path):
    arch = tiny_dsv3_arch()
    raw = raw_mla_tensors(arch, SEED)  # an unfitted head
    head_name = f"{PREFIX}layers.{arch.num_layers}."
    assert np.abs(raw[head_name + "self_attn.o_proj.weight"]).max() > 0
    folder = write_dsv3_checkpoint(tmp_path / "release", arch, tensors=raw, fp8_eh_proj=True)
    package = compile_spec(write_spec(tmp_path / "spec.yaml", "dsv3", f"{{hf: {folder.name}}}"), tmp_path / "pkg")
    meant = as_meant(raw, fp8_eh_proj=True)
    assert not np.array_equal(meant[head_name + "eh_proj.weight"], raw[head_name + "eh_proj.weight"])  # FP8 too
    head = GraphSession(package / "mtp" / "mtp.onnx")
    forward = _torch_head(arch, meant)
    assert_head_graph_matches(head, forward, list(PROMPTS[1]), arch.hidden_size)
