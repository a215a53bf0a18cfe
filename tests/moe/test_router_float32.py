"""Routers score in float32 in every package: a float16 package picks the experts the checkpoint's own
float32 routing picks (transformers' routers score in float32), where float16 scores would pick others.

The checkpoint is built so that float16 cannot tell two experts apart: router rows 2 and 3 of layer 1 are
`w` and `w * (1 + 1e-4)` with `w` exact in float16, so both round to the same float16 row and give equal
float16 logits (a tie, which TopK breaks towards expert 2), while in float32 expert 3 wins wherever the
logit is positive. Expert 0 is always chosen (its selection bias), experts 1 and 4..7 never, so the second
slot is the only choice. Expert 3's output is far from expert 2's, so the choice shows in the hidden states.
"""

from __future__ import annotations

import numpy as np

from mtpc.cli.main import main
from mtpc.reference.forward import DecoderReference
from mtpc.sources.random_weights_glm4moe import canonical_glm4moe_tensors
from mtpc.weights import ArrayWeightStore
from tests.graphs.tiny import empty_state, run, session
from tests.fixtures.glm4moe_checkpoints import fitted_glm_tensors, tiny_glm_arch, write_glm_checkpoint

IDS = [45, 12, 77, 30, 61, 8, 20, 66, 39, 91, 5, 52]
LAYER = "model.layers.1.mlp."


def _near_tie_tensors(arch) -> dict[str, np.ndarray]:
    tensors = dict(fitted_glm_tensors(arch))
    router = np.zeros_like(tensors[LAYER + "gate.weight"])
    w = np.random.default_rng(7).normal(0.0, 0.5, router.shape[1]).astype(np.float16).astype(np.float32)
    router[2], router[3] = w, w * np.float32(1 + 1e-4)
    assert np.array_equal(router[2].astype(np.float16), router[3].astype(np.float16))
    bias = np.full(router.shape[0], -10.0, np.float32)
    bias[0], bias[2], bias[3] = 10.0, 0.0, 0.0
    tensors[LAYER + "gate.weight"], tensors[LAYER + "gate.e_score_correction_bias"] = router, bias
    tensors[LAYER + "experts.3.down_proj.weight"] = -3.0 * tensors[LAYER + "experts.2.down_proj.weight"]
    return tensors


def _reference_hidden(arch, tensors: dict[str, np.ndarray]) -> np.ndarray:
    store = ArrayWeightStore(canonical_glm4moe_tensors(arch, tensors))
    return DecoderReference(arch, store).forward(np.asarray([IDS]))[1]


def _package_hidden(package) -> np.ndarray:
    sess = session(package / "model.onnx")
    s = len(IDS)
    feeds = {"input_ids": np.asarray([IDS], np.int64), "attention_mask": np.ones((1, s), np.int64),
             "position_ids": np.arange(s, dtype=np.int64)[None], **empty_state(sess, 1)}
    return run(sess, feeds)["hidden_states"].astype(np.float32)


def test_a_float16_package_routes_as_float32_does(tmp_path):
    arch = tiny_glm_arch()
    tensors = _near_tie_tensors(arch)
    source = write_glm_checkpoint(tmp_path / "hf", arch, tensors=tensors)
    spec = tmp_path / "glm.yaml"
    spec.write_text(f"mtpc: 1\nname: glm-router\nsource:\n  hf: {source}\nprecision: {{io_dtype: float16}}\n"
                    'targets:\n  onnxruntime_genai: {version: "0.18.0", execution_provider: cpu, attention: dense}\n',
                    encoding="utf-8")
    assert main(["compile", str(spec), "-o", str(tmp_path / "pkg"), "-q"]) == 0

    float32_choice = _reference_hidden(arch, tensors)
    # What float16 scores choose: the tie, broken towards expert 2 (the reference's sort is stable, as TopK).
    tied = dict(tensors)
    tied[LAYER + "gate.weight"] = tensors[LAYER + "gate.weight"].copy()
    tied[LAYER + "gate.weight"][3] = tied[LAYER + "gate.weight"][2]
    float16_choice = _reference_hidden(arch, tied)
    got = _package_hidden(tmp_path / "pkg")

    error = np.abs(got - float32_choice).max(axis=-1)[0]
    choice_matters = np.abs(float16_choice - float32_choice).max(axis=-1)[0]
    assert (choice_matters > 0.5).sum() >= 3, choice_matters  # tokens where the two choices part
    assert error.max() < 0.05, (error, choice_matters)


def test_the_router_is_float32_whatever_the_io_dtype(tmp_path):
    from mtpc.passes.quantization import role_of
    from mtpc.ir import SourceTensor, WeightRole

    assert role_of(SourceTensor("layers.1.mlp.gate.weight", (8, 64), "bfloat16")) is WeightRole.ROUTER
    assert role_of(SourceTensor("layers.1.mlp.shared_expert.gate_proj.weight", (32, 64), "bfloat16")) is WeightRole.LINEAR
