"""The profile's fused kernels: present where chosen, and each one computing what the basic ops compute.

The reference-parity tests (test_qwen35.py, test_mtp_head.py, ...) run the graphs as the CPU
profile builds them, fused. These check the choice itself: which kernels a CPU graph uses, that
a graph with none of them (an execution provider the profile does not know) still matches the
numpy reference, and that every fusion alone agrees with the spelled-out graph on distinct MRoPE
positions for the T, H and W rows.
"""

from dataclasses import fields, replace

import numpy as np
import onnx
import pytest

import mtpc.emit.onnx_graphs as onnx_graphs
from mtpc.profiles.kernels import NO_FUSION, fused_kernels
from mtpc.reference.forward import Qwen35Reference
from mtpc.sources.random_weights import seeded_store

from .tiny import ORT_HEAD_FILE, emit, empty_state, make_ir, run, session

PROMPT = np.array([[3, 17, 42, 9, 250, 1]], np.int64)
# T, H and W rows apart, so a rotary that ignored MRoPE's sections would differ.
POSITIONS = np.stack([np.arange(6), np.arange(6) * 2 + 1, np.arange(6)[::-1] + 3])[:, None, :].astype(np.int64)
# MLA's GroupQueryAttention is the one kernel CPU graphs leave off on purpose (measured slower there,
# profiles/kernels.py), and this Qwen3.5 model has no MLA: tests/deepseek2/test_deepseek2_latent_attention.py
# holds both of its forms to the reference.
# The fusions CPU graphs take. Not these, on purpose: MLA in GroupQueryAttention (its basic-op form is 1.9x
# faster at 4k context) and the kernels' own state_window attribute (CUDA kernels only): profiles/kernels.py.
CUDA_ONLY = {"mla_group_query_attention", "state_window", "window_group_query_attention"}
FLAGS = [f.name for f in fields(NO_FUSION) if f.name not in CUDA_ONLY]


@pytest.fixture(scope="module")
def store(arch):
    return seeded_store(arch, 0)


def _package(arch, store, out, kernels):
    original = onnx_graphs.fused_kernels
    onnx_graphs.fused_kernels = lambda provider, **_: kernels
    try:
        emit(make_ir(arch), store, out)
    finally:
        onnx_graphs.fused_kernels = original
    return out


def _outputs(path, ids=PROMPT, positions=POSITIONS):
    sess = session(path)
    feeds = {"input_ids": ids, "attention_mask": np.ones(ids.shape, np.int64), "position_ids": positions,
             **empty_state(sess, ids.shape[0])}
    return run(sess, feeds)


@pytest.fixture(scope="module")
def unfused(arch, store, tmp_path_factory):
    return _package(arch, store, tmp_path_factory.mktemp("unfused") / "pkg", NO_FUSION)


def test_cpu_graphs_use_every_fusion(arch, store, tmp_path):
    assert all(getattr(fused_kernels("cpu"), flag) for flag in FLAGS)
    assert not any(getattr(fused_kernels("cpu"), flag) for flag in CUDA_ONLY)
    out = tmp_path / "pkg"
    emit(make_ir(arch), store, out)
    for graph in ("model.onnx", ORT_HEAD_FILE):
        ops = {n.op_type for n in onnx.load(str(out / graph), load_external_data=False).graph.node}
        assert {"SkipSimplifiedLayerNormalization", "RotaryEmbedding"} <= ops, graph
        assert not {"Sin", "Cos"} - ops  # cos/sin are still computed from the MRoPE rows, in the graph
    main_ops = [n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node]
    assert "QuickGelu" in main_ops and "Sqrt" not in main_ops  # SiLU and the L2 norms
    # Per layer: the packed input projections (q/k/v, or qkv/z/a/b), the output projection, packed
    # gate/up and down; then the LM head.
    assert main_ops.count("MatMul") == 4 * len(arch.layer_kinds) + 1


def test_cpu_float16_graphs_keep_the_kernels_that_do_not_round_more(arch, store, tmp_path):
    # onnxruntime computes much of a float16 graph in float32 on CPU; the fused ops with float16
    # kernels would round where the basic-op graph does not (profiles/kernels.py).
    kernels = fused_kernels("cpu", io_dtype="float16")
    assert not (kernels.skip_norm or kernels.rotary or kernels.packed_projections)
    assert kernels.silu and kernels.linear_gate
    out = tmp_path / "pkg"
    emit(make_ir(arch, io_dtype="float16"), store, out)
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
    assert {"QuickGelu", "LinearAttentionGate"} <= ops
    assert not ops & {"SkipSimplifiedLayerNormalization", "RotaryEmbedding"}


def test_unknown_provider_gets_the_basic_op_graph():
    assert fused_kernels("webgpu") == NO_FUSION
    assert not fused_kernels("cpu", packed_tokens=True).rotary  # RotaryEmbedding-23 wants [B, S, X]


def test_basic_op_graph_matches_the_reference(arch, store, unfused):
    logits, post, _, _ = Qwen35Reference(arch, store).forward(PROMPT)
    out = _outputs(unfused / "model.onnx", positions=np.broadcast_to(np.arange(6), (3, 1, 6)).astype(np.int64))
    np.testing.assert_allclose(out["logits"], logits, atol=1e-4, rtol=0)
    np.testing.assert_allclose(out["hidden_states"], post, atol=1e-4, rtol=0)


@pytest.mark.parametrize("flag", FLAGS)
def test_each_fusion_alone_computes_what_the_basic_ops_do(arch, store, unfused, tmp_path, flag):
    fused = _package(arch, store, tmp_path / "pkg", replace(NO_FUSION, **{flag: True}))
    want, got = _outputs(unfused / "model.onnx"), _outputs(fused / "model.onnx")
    assert set(want) == set(got)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-5, err_msg=name)  # float32 rounding
