"""DeepSeek-V3's MTP layer (`model.layers.{L}.*`, kept on read) against a torch rendition built from transformers'
own `DeepseekV3` modules: transformers 5.18 has no MTP model for DeepSeek-V3 (it drops the layer on load), so
the rendition is the MTP module of DeepSeek-V3's report (embed, enorm / hnorm, eh_proj, one decoder layer,
shared_head.norm, the trunk's LM head) around transformers' `DeepseekV3DecoderLayer`, with yarn RoPE and its
softmax mscale. The head is not the fitted one (its attention and experts all contribute), its projections
FP8 blocks (eh_proj included, as the release stores it): the package's `mtp.onnx` on onnxruntime must compute
what the rendition does on the dequantized weights, prefill and a draft step over its own cache."""

from __future__ import annotations

import numpy as np

from tests.deepseek2.test_deepseek2_graphs import _Session
from tests.fixtures.deepseek2_checkpoints import PREFIX, raw_mla_tensors
from tests.fixtures.deepseek3_checkpoints import (
    PROMPTS, SEED, as_meant, tiny_dsv3_arch, transformers_dsv3_config, write_dsv3_checkpoint,
)
from tests.fixtures.glm4moe_checkpoints import fuse_experts
from tests.runtime.conftest import compile_spec, write_spec


def _torch_head(arch, tensors):
    import torch
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

    config = transformers_dsv3_config(arch)
    h, eps = arch.hidden_size, arch.rms_norm_eps
    head = f"{PREFIX}layers.{arch.num_layers}."
    t = {n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in tensors.items()}
    layer = m.DeepseekV3DecoderLayer(config, layer_idx=arch.num_layers - 1).eval()  # a sparse layer's modules
    local = {n[len(head):]: v for n, v in fuse_experts(tensors, range(arch.num_layers + 1), arch.moe.num_experts).items()
             if n.startswith(head)}
    layer.load_state_dict({n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in local.items()
                           if not n.startswith(("eh_proj", "enorm", "hnorm", "shared_head"))}, strict=True)
    norms = {}
    for name in ("enorm", "hnorm", "shared_head.norm"):
        norms[name] = m.DeepseekV3RMSNorm(h, eps)
        norms[name].weight.data.copy_(t[f"{head}{name}.weight"])
    rotary = m.DeepseekV3RotaryEmbedding(config)

    def forward(ids, seed):
        with torch.no_grad():
            ids = torch.tensor([ids])
            embedded = norms["enorm"](t[PREFIX + "embed_tokens.weight"][ids])
            x = torch.cat([embedded, norms["hnorm"](torch.from_numpy(seed))], dim=-1) @ t[head + "eh_proj.weight"].T
            s = ids.shape[1]
            positions = torch.arange(s)[None]
            mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)[None, None]
            y = layer(x, attention_mask=mask, position_ids=positions, position_embeddings=rotary(x, positions))
            out = norms["shared_head.norm"](y)
            return (out @ t["lm_head.weight"].T).numpy(), out.numpy()

    return forward


def test_the_mtp_layer_computes_what_transformers_modules_do(tmp_path):
    arch = tiny_dsv3_arch()
    raw = raw_mla_tensors(arch, SEED)  # an unfitted head
    head_name = f"{PREFIX}layers.{arch.num_layers}."
    assert np.abs(raw[head_name + "self_attn.o_proj.weight"]).max() > 0
    folder = write_dsv3_checkpoint(tmp_path / "release", arch, tensors=raw, fp8_eh_proj=True)
    package = compile_spec(write_spec(tmp_path / "spec.yaml", "dsv3", f"{{hf: {folder.name}}}"), tmp_path / "pkg")
    meant = as_meant(raw, fp8_eh_proj=True)
    assert not np.array_equal(meant[head_name + "eh_proj.weight"], raw[head_name + "eh_proj.weight"])  # FP8 too
    head = _Session(package / "mtp" / "mtp.onnx")
    forward = _torch_head(arch, meant)
    ids = list(PROMPTS[1])
    seed = np.random.default_rng(0).standard_normal((1, len(ids) + 1, arch.hidden_size)).astype(np.float32)
    expected_logits, expected_hidden = forward(ids + [40], seed)
    s = len(ids)
    out = head.run(ids, None, 0, hidden_states=seed[:, :s])
    np.testing.assert_allclose(out["hidden_states_out"], expected_hidden[:, :s], rtol=0, atol=5e-5)
    np.testing.assert_allclose(out["logits"].astype(np.float32), expected_logits[:, :s], rtol=2e-3, atol=2e-3)
    step = head.run([40], out, s, hidden_states=seed[:, s:])  # a draft step over the head's own cache
    np.testing.assert_allclose(step["hidden_states_out"], expected_hidden[:, s:], rtol=0, atol=5e-5)
    np.testing.assert_allclose(step["logits"].astype(np.float32), expected_logits[:, s:], rtol=2e-3, atol=2e-3)
