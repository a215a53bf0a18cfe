"""Step-3.5's MTP head graph against a rendition built from transformers' own modules, and its conventions.

transformers 5.24 has no Step MTP that loads a release: `Step3p7TextConfig.get_mtp_config()` gives the sliding MTP
layers the full layers' query-head count (4 here, where the layers hold 6), and `MtpModel.from_pretrained` misses
`transformer.shared_head.norm`. The rendition is therefore assembled from its modules: `MtpLayer` around a
`Step3p7DecoderLayer` built from a `Step3p7TextConfig` of sliding layers alone (6 heads, a window of 8, the sliding
rope), `Step3p7RMSNorm` for enorm / hnorm / shared_head.norm (1 + w), the layer's own `shared_head.output`, the mask
transformers builds for a sliding layer. The head is unfitted (its attention and MLP add to the stream) and its
prompt is longer than the window, so the window is read.

Controls: a rendition with the full layers' head count cannot hold the layer's tensors; one with the zero-centred
+1 left out, or handing on the hidden state after shared_head.norm, is not the graph; and a package seeded after
the trunk's final norm (`mtp.seed_hidden: post_norm`, transformers' generic MTP convention) drafts as that rendition
and has fewer drafts accepted than the authors' pre-norm convention.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from mtpc.ir import SeedHidden
from mtpc.reference.forward import MtpHeadReference
from tests.fixtures.fitted_head import simulate_speculative
from tests.fixtures.step35_checkpoints import PREFIX, PROMPTS, raw_step_tensors, step_config
from tests.runtime import decoding

from .conftest import compile_step

WINDOW_PROMPT = [45, 12, 77, 30, 61, 8, 20, 66, 39, 91, 5, 52]  # 12 tokens, the window 8


def _mtp_config(arch, heads: int):
    """A Step3p7TextConfig of the MTP layers alone: sliding, dense, unclamped, `heads` query heads."""
    from transformers import Step3p7TextConfig

    keys = {k: v for k, v in step_config(arch).items() if k not in ("architectures", "model_type")}
    keys.update(num_hidden_layers=1, layer_types=["sliding_attention"], num_nextn_predict_layers=0,
                swiglu_limits=None, swiglu_limits_shared=None, rope_theta=[arch.sliding_attention.rope.theta],
                partial_rotary_factors=[arch.sliding_attention.rope.partial_rotary_factor], moe_layers_enum="",
                attention_other_setting={"num_attention_heads": heads})
    config = Step3p7TextConfig(**keys)
    config._attn_implementation = "eager"
    return config


def torch_step_head(arch, tensors: dict[str, np.ndarray], heads: int | None = None, *, post_norm_chain: bool = False):
    """`forward(ids, seed) -> (logits, handed-on hidden)` of MTP layer `model.layers.{L}` from transformers' modules."""
    import torch
    from transformers.masking_utils import and_masks, causal_mask_function, sliding_window_overlay
    from transformers.modeling_layers import MtpLayer
    from transformers.models.step3p7 import modeling_step3p7 as m

    config = _mtp_config(arch, heads or arch.sliding_attention.num_attention_heads)
    layer = MtpLayer(config, m.Step3p7DecoderLayer, m.Step3p7RMSNorm, 0, use_post_norm=False).eval()
    head = f"{PREFIX}layers.{arch.num_layers}."
    local = {n[len(head):]: v for n, v in tensors.items() if n.startswith(head)}
    state = {("mtp_block." + n if not n.startswith(("eh_proj", "enorm", "hnorm", "transformer.")) else n): v
             for n, v in local.items() if not n.startswith("transformer.")}
    layer.load_state_dict({n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in state.items()}, strict=True)
    norm = m.Step3p7RMSNorm(arch.hidden_size, eps=arch.rms_norm_eps)
    norm.weight.data.copy_(torch.from_numpy(local["transformer.shared_head.norm.weight"]))
    output = torch.from_numpy(local["transformer.shared_head.output.weight"])
    embed = torch.from_numpy(tensors[PREFIX + "embed_tokens.weight"])
    rotary = m.Step3p7RotaryEmbedding(config)

    def forward(ids, seed):
        with torch.no_grad():
            s = len(ids)
            positions = torch.arange(s)[None]
            allowed = and_masks(causal_mask_function, sliding_window_overlay(arch.sliding_window))(
                0, 0, torch.arange(s)[:, None], torch.arange(s)[None, :])
            mask = torch.where(allowed, 0.0, float("-inf"))[None, None]
            x = embed[torch.tensor([ids])]
            pre = layer(x, torch.from_numpy(seed), rotary(x, positions, "sliding_attention"), mask, positions, None)
            post = norm(pre)
            return (post @ output.T).numpy(), (post if post_norm_chain else pre).numpy()

    return forward


class _Head:
    """mtp/mtp.onnx on onnxruntime, fed a prompt at once as onnxruntime-genai feeds it."""

    def __init__(self, path):
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]

    def run(self, ids, seed) -> dict:
        feeds = {"input_ids": np.asarray([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
                 "position_ids": np.arange(len(ids), dtype=np.int64)[None], "hidden_states": seed}
        for i in self.session.get_inputs():
            if i.name.startswith("past_key_values."):
                feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
        return dict(zip(self.names, self.session.run(self.names, feeds)))


@pytest.fixture(scope="module")
def unfitted(step_dir, arch):
    """The release with its seeded (unfitted) MTP layers, compiled, and its tensors."""
    from tests.fixtures.step35_checkpoints import write_step_checkpoint
    from tests.runtime.conftest import compile_spec, write_spec

    raw = raw_step_tensors(arch, 4)
    folder = write_step_checkpoint(step_dir / "unfitted", arch, tensors=raw)
    spec = write_spec(step_dir / "unfitted.yaml", "unfitted", f"{{hf: {folder.name}}}")
    return raw, compile_spec(spec, step_dir / "pkg-unfitted")


def test_the_head_graph_computes_what_transformers_modules_do(unfitted, arch):
    raw, package = unfitted
    seed = np.random.default_rng(0).standard_normal((1, len(WINDOW_PROMPT), arch.hidden_size)).astype(np.float32)
    out = _Head(package / "mtp" / "mtp.onnx").run(WINDOW_PROMPT, seed)
    logits, hidden = torch_step_head(arch, raw)(WINDOW_PROMPT, seed)
    np.testing.assert_allclose(out["hidden_states_out"], hidden, rtol=0, atol=5e-5)
    np.testing.assert_allclose(out["logits"].astype(np.float32), logits, rtol=2e-3, atol=2e-3)
    # The controls: each is another function than the graph's.
    _, post = torch_step_head(arch, raw, post_norm_chain=True)(WINDOW_PROMPT, seed)
    assert np.abs(out["hidden_states_out"] - post).max() > 0.1
    shifted = {n: (v - 1 if n.endswith("norm.weight") else v) for n, v in raw.items()}  # the +1 left out
    wrong_logits, _ = torch_step_head(arch, shifted)(WINDOW_PROMPT, seed)
    assert np.abs(out["logits"].astype(np.float32) - wrong_logits).max() > 0.1
    with pytest.raises(RuntimeError, match="size mismatch"):  # transformers' get_mtp_config() head count
        torch_step_head(arch, raw, heads=arch.num_attention_heads)


def test_a_head_seeded_after_the_final_norm_drafts_worse(step_dir, release, arch, store, main_reference, models):
    post = compile_step(step_dir, "post-norm", "mtp:\n  seed_hidden: post_norm\n")
    post_models = decoding.load(post), decoding.load(post / "mtp")
    post_head = MtpHeadReference(arch, store, seed_hidden=SeedHidden.POST_NORM)
    pre_head = MtpHeadReference(arch, store)
    for prompt in PROMPTS:
        run = decoding.speculative(*post_models, list(prompt), 20, 3)
        expected = simulate_speculative(main_reference, post_head, list(prompt), 20, 3)
        assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
        authors = simulate_speculative(main_reference, pre_head, list(prompt), 20, 3)
        assert decoding.speculative(*models, list(prompt), 20, 3).accepted == authors.accepted
        # Half the acceptance rate at most (measured: 7 of 36 against 12 of 21).
        assert 2 * run.accepted / run.proposed <= authors.accepted / authors.drafted, (run, authors)
