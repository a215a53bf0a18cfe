"""Nemotron-H's graphs against independent oracles, and the decisions where its references disagree.

- The MTP block (transformers drops `mtp.*` on load) against `torch_head`, built from transformers' own modules
  the way vLLM's `nemotron_h_mtp` composes them; `final_layernorm` is an RMSNorm there and in TensorRT-LLM, a
  LayerNorm in llama.cpp's graph: the head matches the RMSNorm rendition and not the LayerNorm one.
- dt is not clamped: transformers' decoding kernel (`mamba2_selective_state_update`) and its prefill kernel with the
  releases' `time_step_limit` (0, inf) compute mtpc's scan on a head whose dt falls far below `time_step_min`; the
  prefill kernel with the clamp transformers' mixer passes it (`time_step_min`) does not.
- A long prompt is one forward: the graph holds one LinearAttention per Mamba2 layer (no per-token loop) and a
  300-token prefill equals the reference.
- Mutants the oracles catch: B / C shared by the wrong heads (tiled instead of transformers' contiguous groups),
  and the gated norm normalising before the gate: onnxruntime-genai's greedy tokens leave transformers'.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import mtpc.graphs.mamba2 as mamba2_graph
from mtpc.reference import nemotron_h as reference_mixers
from mtpc.reference.forward import DecoderReference
from mtpc.weights import ArrayWeightStore
from tests.clients import hf_transformers
from tests.fixtures.nemotron_h_checkpoints import (
    PROMPTS,
    canonical_nemotron_tensors,
    fitted_nemotron_tensors,
    load_transformers_nemotron,
    raw_nemotron_tensors,
    tiny_nemotron_arch,
    torch_head,
    write_nemotron_checkpoint,
)
from tests.fixtures.torch_trailing_head import GraphSession, assert_head_graph_matches
from tests.runtime import decoding
from tests.runtime.conftest import compile_spec, write_spec

STEPS = 20


def _package(tmp_path, arch, tensors, extra: str = ""):
    folder = write_nemotron_checkpoint(tmp_path / "release", arch, tensors=tensors)
    return compile_spec(write_spec(tmp_path / "spec.yaml", "nemotron", f"{{hf: {folder.name}}}", extra), tmp_path / "pkg")


@pytest.fixture(scope="module", params=[False, True], ids=["moe", "latent moe"])
def unfitted(tmp_path_factory, request):
    """A package of the seeded weights with the head unfitted: its attention and experts all contribute (the
    routed experts in a latent space for Super's LatentMoE)."""
    arch = tiny_nemotron_arch(latent=request.param)
    raw = raw_nemotron_tensors(arch)
    assert np.abs(raw["mtp.layers.0.mixer.o_proj.weight"]).max() > 0
    return arch, raw, _package(tmp_path_factory.mktemp("unfitted"), arch, raw)


def test_the_mtp_block_computes_what_transformers_modules_do(unfitted):
    arch, raw, package = unfitted
    head = GraphSession(package / "mtp" / "mtp.onnx")
    assert_head_graph_matches(head, torch_head(arch, raw), list(PROMPTS[1]), arch.hidden_size)


def test_the_heads_final_norm_is_an_rms_norm_not_llama_cpps_layer_norm(unfitted):
    """llama.cpp's `graph_mtp` applies `LLM_NORM` (a LayerNorm) where vLLM and TensorRT-LLM apply an RMSNorm: on a
    stream whose mean is not zero the two differ, and the head is the RMSNorm one."""
    arch, raw, package = unfitted
    seed = np.random.default_rng(1).standard_normal((1, 4, arch.hidden_size)).astype(np.float32)
    prompt = list(PROMPTS[0][:4])
    out = GraphSession(package / "mtp" / "mtp.onnx").run(prompt, None, 0, hidden_states=seed)["hidden_states_out"]
    _, rms = torch_head(arch, raw)(prompt, seed)
    _, layer = torch_head(arch, raw, final_norm="layer")(prompt, seed)
    np.testing.assert_allclose(out, rms, rtol=0, atol=5e-5)
    assert np.abs(out - layer).max() > 1e-2


def test_dt_is_not_clamped_as_transformers_decoding_and_the_releases_limit_have_it():
    """mtpc's scan (the numpy reference's, which the graphs are held to) on a head whose softplus(dt + dt_bias) is
    about 6e-6: transformers' decoding kernel and its prefill kernel under the releases' `time_step_limit` (0, inf)
    compute it; the prefill kernel under the limit transformers' mixer passes (`time_step_min`, 1e-3) does not."""
    import torch
    from transformers.models.nemotron_h import modeling_nemotron_h as nh

    rng = np.random.default_rng(0)
    b, s, heads, p, groups, n = 1, 6, 4, 8, 2, 16
    hs, dt = rng.standard_normal((b, s, heads, p)), rng.standard_normal((b, s, heads))
    dt_bias = np.array([-12.0, -1.0, 0.5, 2.0])
    a, d = -np.arange(1.0, heads + 1), rng.standard_normal(heads)
    bs, cs = rng.standard_normal((b, s, groups, n)), rng.standard_normal((b, s, groups, n))
    ours, _ = reference_mixers.selective_scan(hs, dt, dt_bias, a, bs, cs, d, np.zeros((b, heads, n, p)))
    t = lambda x: torch.tensor(np.asarray(x), dtype=torch.float64)  # noqa: E731
    state = torch.zeros(b, heads, p, n, dtype=torch.float64)
    for i in range(s):
        y = nh.mamba2_selective_state_update(
            state, t(hs[:, i]), t(dt[:, i])[..., None].expand(-1, -1, p), t(a)[:, None, None].expand(-1, p, n),
            t(bs[:, i]), t(cs[:, i]), t(d)[:, None].expand(-1, p), z=None, dt_bias=t(dt_bias)[:, None].expand(-1, p),
            dt_softplus=True)
        np.testing.assert_allclose(y.numpy(), ours[:, i], rtol=1e-6, atol=1e-6)  # its kernels take float32 steps
    mixer = nh.NemotronHMamba2Mixer(tiny_nemotron_transformers_config(), layer_idx=0)
    assert mixer.time_step_limit == (1e-3, float("inf"))  # what transformers' prefill clamps at
    scan = lambda limit: nh.mamba2_chunk_scan(t(hs), t(dt), t(a), t(bs), t(cs), chunk_size=4, D=t(d),  # noqa: E731
                                              dt_bias=t(dt_bias), dt_softplus=True, dt_limit=limit).numpy()
    np.testing.assert_allclose(scan((0.0, float("inf"))), ours, rtol=1e-6, atol=1e-6)
    assert np.abs(scan(mixer.time_step_limit)[:, :, 0] - ours[:, :, 0]).max() > 1e-3


def tiny_nemotron_transformers_config():
    from tests.fixtures.nemotron_h_checkpoints import transformers_config

    return transformers_config(tiny_nemotron_arch())


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attribute.g)


@pytest.mark.parametrize("window", ["auto", "off"])
def test_a_long_prompt_is_one_forward_without_a_per_token_loop(tmp_path, window):
    arch = tiny_nemotron_arch()
    raw = raw_nemotron_tensors(arch)
    folder = write_nemotron_checkpoint(tmp_path / "release", arch, tensors=raw)
    spec = write_spec(tmp_path / "spec.yaml", "nemotron", f"{{hf: {folder.name}}}")
    spec.write_text(spec.read_text().replace("attention: dense}", f"attention: dense, state_window: {window}}}"))
    package = compile_spec(spec, tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    ops = [node.op_type for node in _all_nodes(model.graph)]
    mamba_layers = len(arch.state_layers)
    # Unwindowed: one call per layer. Windowed: a one-token branch and one call per slot (the first runs every
    # token up to its own), whatever the prompt's length.
    per_layer = 1 if window == "off" else 1 + decoding.state_window(package)
    assert ops.count("LinearAttention") == per_layer * mamba_layers and not {"Loop", "Scan"} & set(ops)
    prompt = list(np.random.default_rng(2).integers(3, 250, 300))
    out = GraphSession(package / "model.onnx").run(prompt, None, 0)
    logits, post, _, _ = DecoderReference(arch, ArrayWeightStore(canonical_nemotron_tensors(arch, raw))).forward(
        np.asarray([prompt]))
    np.testing.assert_allclose(out["hidden_states"], post, rtol=0, atol=1e-4)
    assert (np.argmax(out["logits"], -1) == np.argmax(logits, -1)).all()


def _tiled_groups(b, ops, bs, cs, m):
    """The mutant: B and C tiled over the heads, head h reading group h % G (not transformers' h // (H / G))."""
    from mtpc.graphs.blocks import split_heads

    repeats = b.i64("tile_heads", [1] * ops.lead + [m.num_heads // m.num_groups, 1])
    return tuple(b.op("Tile", [split_heads(b, ops, x, m.num_groups, m.state_size, f"{n}/Reshape"), repeats], name=f"{n}/Tile")
                 for x, n in ((cs, "C"), (bs, "B")))


def _norm_before_gate(b, ops, y, z, weight, m, eps):
    """The mutant: the group RMS norm of y, then the gate (`norm_before_gate=True`)."""
    from mtpc.graphs.blocks import merge_heads, silu, split_heads

    width = m.inner_size // m.num_groups
    normed = b.op("RMSNormalization", [split_heads(b, ops, y, m.num_groups, width, "norm/groups"),
                                       b.constant("ones", np.ones(width, np.float32))],
                  {"epsilon": eps, "axis": -1, "stash_type": 1}, name="norm/RMSNormalization")
    normed = b.op("Mul", [merge_heads(b, ops, normed, m.inner_size, "norm/merge"), weight], name="norm/Mul")
    return b.op("Mul", [normed, silu(b, z, "z/silu")], name="gate/Mul")


@pytest.fixture(scope="module")
def transformers_tokens():
    arch = tiny_nemotron_arch()
    model = load_transformers_nemotron(arch, fitted_nemotron_tensors(arch, with_mtp=False))
    return hf_transformers.greedy(model, list(PROMPTS[0]), STEPS)


@pytest.mark.parametrize("mutant", ["tiled groups", "norm before gate"])
def test_a_wrong_group_mapping_or_the_norm_before_the_gate_leaves_transformers_tokens(tmp_path, transformers_tokens,
                                                                                        mutant):
    arch = tiny_nemotron_arch()
    with pytest.MonkeyPatch.context() as patch:
        if mutant == "tiled groups":
            rule = mamba2_graph.mamba2_rule
            patch.setattr(mamba2_graph, "query_key_heads", _tiled_groups)
            patch.setattr(mamba2_graph, "mamba2_rule",
                          lambda a: __import__("dataclasses").replace(rule(a), key_heads=a.mamba.num_heads))
        else:
            patch.setattr(mamba2_graph, "gated_group_norm", _norm_before_gate)
        package = _package(tmp_path, arch, fitted_nemotron_tensors(arch))
    tokens = decoding.greedy(decoding.load(package), list(PROMPTS[0]), STEPS)
    assert tokens != transformers_tokens


@pytest.mark.parametrize("latent", [False, True], ids=["moe", "latent moe"])
def test_int4_relu2_experts_in_qmoe_compute_the_reference_on_their_weights(tmp_path, latent):
    """The relu² experts quantized to QMoE's 4-bit blocks (the SwiGLU form over duplicated rows, accuracy level 0:
    float activations) compute what the reference does with the blocks' own values."""
    from mtpc.ir import QuantForm
    from mtpc.weights.quant import dequantize_experts

    arch = tiny_nemotron_arch(latent=latent)
    tensors = fitted_nemotron_tensors(arch)
    extra = ("quantization:\n  default: {bits: null}\n  overrides:\n"
             "    - {match: '*.mlp.experts.*', bits: 4, block_size: 16, accuracy_level: 0}\n")
    package = _package(tmp_path, arch, tensors, extra)
    ops = {node.op_type for node in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node}
    assert "QMoE" in ops and "MoE" not in ops
    canonical = canonical_nemotron_tensors(arch, tensors)
    stored = {n: dequantize_experts(v, QuantForm(4, 16, False), v.shape) if ".mlp.experts." in n else v
              for n, v in canonical.items()}
    prompt = list(PROMPTS[0])
    logits, post, _, _ = DecoderReference(arch, ArrayWeightStore(stored)).forward(np.asarray([prompt]))
    out = GraphSession(package / "model.onnx").run(prompt, None, 0)
    np.testing.assert_allclose(out["hidden_states"], post, rtol=0, atol=1e-4)
