"""MiMo-V2-Flash's MTP head graph against a rendition built from transformers' own modules, and its conventions.

transformers 5.24 implements MiMo-V2-Flash's trunk and drops `model.mtp.*` on load; the rendition of MTP layer
`model.mtp.layers.0` is assembled from its modules: `MtpLayer` around a `MiMoV2FlashDecoderLayer` built from a
`MiMoV2FlashConfig` of one sliding layer with a dense MLP (transformers gives it twice the full layers' KV heads and
the sinks, as the release does), `MiMoV2FlashRMSNorm` for enorm / hnorm / `final_layernorm` (MtpLayer's post norm),
the trunk's LM head, and the mask transformers builds for a sliding layer of its window. The head is unfitted (its
attention and MLP add to the stream) and its prompt is longer than the window, so window and sinks are read.

Controls, each another function than the graph's: the rendition with the sinks switched off, with vLLM's window
(one token narrower: `sliding_window_size` taken as inclusive), or handing on the hidden state before
`final_layernorm`; and a package seeded before the trunk's final norm (`mtp.seed_hidden: pre_norm`, llama.cpp's
mimo2.cpp convention) drafts as that rendition and has fewer drafts accepted than the authors' post-norm one.
"""

from __future__ import annotations

import numpy as np
import pytest

from mtpc.ir import SeedHidden
from mtpc.reference.forward import MtpHeadReference
from tests.fixtures.fitted_head import simulate_speculative
from tests.fixtures.mimo2_checkpoints import (PROMPTS, raw_mimo_tensors, transformers_config, transformers_layer_state,
                                              write_mimo_checkpoint)
from tests.runtime import decoding

from .conftest import compile_mimo

WINDOW_PROMPT = [45, 12, 77, 30, 61, 8, 20, 66, 39, 91, 5, 52]  # 12 tokens, the window 8


def torch_mimo_head(arch, tensors: dict[str, np.ndarray], *, sinks: bool = True, window: int | None = None,
                    pre_norm_chain: bool = False):
    """`forward(ids, seed) -> (logits, handed-on hidden)` of MTP layer `model.mtp.layers.0` from transformers' modules."""
    import torch
    from transformers.masking_utils import and_masks, causal_mask_function, sliding_window_overlay
    from transformers.modeling_layers import MtpLayer
    from transformers.models.mimo_v2_flash import modeling_mimo_v2_flash as m

    config = transformers_config(arch, layers=(arch.mtp_layer_kind,), dense=True)
    layer = MtpLayer(config, m.MiMoV2FlashDecoderLayer, m.MiMoV2FlashRMSNorm, 0, use_post_norm=True).eval()
    p = "model.mtp.layers.0."
    state = transformers_layer_state(arch, tensors, p, "mtp_block.")
    for own, name in (("eh_proj", "eh_proj"), ("enorm", "enorm"), ("hnorm", "hnorm"), ("final_layernorm", "post_norm")):
        state[name + ".weight"] = state.pop(f"mtp_block.{own}.weight")
    layer.load_state_dict({n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in state.items()}, strict=True)
    if not sinks:
        layer.mtp_block.self_attn.sinks = None
    lm_head = torch.from_numpy(tensors["lm_head.weight"])
    embed = torch.from_numpy(tensors["model.embed_tokens.weight"])
    rotary = m.MiMoV2FlashRotaryEmbedding(config)
    block = layer.mtp_block

    def forward(ids, seed):
        with torch.no_grad():
            s = len(ids)
            positions = torch.arange(s)[None]
            allowed = and_masks(causal_mask_function, sliding_window_overlay(window or arch.sliding_window))(
                0, 0, torch.arange(s)[:, None], torch.arange(s)[None, :])
            mask = torch.where(allowed, 0.0, float("-inf"))[None, None]
            x = embed[torch.tensor([ids])]
            pre = {}
            handle = block.register_forward_hook(lambda mod, args, out: pre.setdefault("out", out))
            post = layer(x, torch.from_numpy(seed), rotary(x, positions, "sliding_attention"), mask, positions, None)
            handle.remove()
            return (post @ lm_head.T).numpy(), (pre["out"] if pre_norm_chain else post).numpy()

    return forward


@pytest.fixture(scope="module")
def unfitted(mimo_dir, arch):
    """The release with its seeded (unfitted) MTP layers, compiled, and its tensors."""
    raw = raw_mimo_tensors(arch)
    write_mimo_checkpoint(mimo_dir / "unfitted", arch, tensors=raw)
    return raw, compile_mimo(mimo_dir, "unfitted", source="unfitted")


def test_the_head_graph_computes_what_transformers_modules_do(unfitted, arch):
    raw, package = unfitted
    seed = np.random.default_rng(0).standard_normal((1, len(WINDOW_PROMPT), arch.hidden_size)).astype(np.float32)
    out = decoding.HeadGraph(package / "mtp" / "mtp.onnx").run(WINDOW_PROMPT, seed)
    logits, hidden = torch_mimo_head(arch, raw)(WINDOW_PROMPT, seed)
    np.testing.assert_allclose(out["hidden_states_out"], hidden, rtol=0, atol=5e-5)
    np.testing.assert_allclose(out["logits"].astype(np.float32), logits, rtol=2e-3, atol=2e-3)
    for control in (dict(sinks=False), dict(window=arch.sliding_window - 1), dict(pre_norm_chain=True)):
        _, other = torch_mimo_head(arch, raw, **control)(WINDOW_PROMPT, seed)
        assert np.abs(out["hidden_states_out"] - other).max() > 1e-2, control


def test_a_head_seeded_before_the_final_norm_drafts_worse(mimo_dir, release, arch, store, main_reference, models):
    pre = compile_mimo(mimo_dir, "pre-norm", extra="mtp:\n  seed_hidden: pre_norm\n")
    pre_models = decoding.load(pre), decoding.load(pre / "mtp")
    pre_head = MtpHeadReference(arch, store, seed_hidden=SeedHidden.PRE_NORM)
    authors_head = MtpHeadReference(arch, store)
    for prompt in PROMPTS:
        run = decoding.speculative(*pre_models, list(prompt), 20, 3)
        expected = simulate_speculative(main_reference, pre_head, list(prompt), 20, 3)
        assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
        authors = simulate_speculative(main_reference, authors_head, list(prompt), 20, 3)
        assert decoding.speculative(*models, list(prompt), 20, 3).accepted == authors.accepted
        # Measured on the first prompt: 9 of 31 against the authors' 12 of 21.
        assert run.accepted / run.proposed < 0.75 * authors.accepted / authors.drafted, (run, authors)
