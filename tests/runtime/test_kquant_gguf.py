"""A Q4_K_M GGUF compiled with `keep: source`, run in onnxruntime-genai (issue 8).

The file is llama.cpp's Q4_K_M mix (`q4_k_m_types`: Q4_K by default and for token_embd,
Q5_K attn_qkv, Q6_K output and the attn_v / ffn_down layers `use_more_bits` picks, F32 norms
and ssm_conv1d) of `kquant_arch`, whose every row length is a multiple of 256, encoded from
real weights by the test encoder (tests/fixtures/kquant_encoder.py, checked against gguf-py).
Its MTP head is fitted, as tests/fixtures/fitted_head.py fits one, to the greedy continuations
of the *quantized* trunk (a head fitted to the float model drafts nothing the quantized model
accepts), then quantized with the rest, so drafts are accepted and rejected.

The oracle is gguf-py's dequantization of the same file, written as an F32 GGUF and compiled
as float: both packages must pick the same greedy tokens. The quantized package runs
MatMulNBits with accuracy_level 0 (set in the spec: the CPU profile's default, 4, rounds the
activations of the 8-bit forms to int8 and changes this model's greedy tokens).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as QT, GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

from mtpc import sources
from mtpc.ir import Architecture, SourceRef
from mtpc.reference.forward import Qwen35Reference
from tests.fixtures.arch import kquant_arch
from tests.fixtures.fitted_head import PROMPTS, fitted_fc
from tests.fixtures.gguf_writer import gguf_name, q4_k_m_types, write_gguf

from .conftest import STEPS, compile_spec, write_spec
from .decoding import greedy, load, speculative

K_QUANTS = (QT.Q4_K, QT.Q5_K, QT.Q6_K)
KEEP_SOURCE = "quantization:\n  default: {keep: source, accuracy_level: 0}\n"


@pytest.fixture(scope="module")
def arch() -> Architecture:  # this module's model, in place of conftest's tiny_arch
    return kquant_arch()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kquant")


def _reference(path: Path, arch: Architecture) -> Qwen35Reference:
    ref = SourceRef("gguf", str(path))
    return Qwen35Reference(arch, sources.open_weights(ref, sources.describe(ref)))


def _fitted_head(main: Qwen35Reference, arch: Architecture) -> dict[str, np.ndarray]:
    """fitted_head.py's head (canonical names), fitted to `main`'s greedy continuations of PROMPTS."""
    w = main.w
    fc = fitted_fc(main, w, arch.rms_norm_eps)
    layer, h = "mtp.layers.0.", arch.hidden_size
    return {
        "mtp.fc.weight": fc,
        "mtp.norm.weight": np.asarray(w["norm.weight"], np.float32),  # GGUF norms hold the effective scale
        layer + "self_attn.o_proj.weight": np.zeros((h, arch.num_attention_heads * arch.head_dim), np.float32),
        layer + "mlp.down_proj.weight": np.zeros((h, arch.intermediate_size), np.float32),
    }


@pytest.fixture(scope="module")
def source(folder, arch) -> Path:
    """The Q4_K_M file, its head fitted to its own quantized trunk.

    The fit reads the trunk through mtpc's GGUF reader; it only decides how often drafts are
    accepted, while the token oracle below is gguf-py's dequantization.
    """
    types = q4_k_m_types(arch)
    trunk = write_gguf(folder / "trunk-q4_k_m.gguf", arch, types=types)
    head = _fitted_head(_reference(trunk, arch), arch)
    replace = {gguf_name(name, arch.num_layers): value for name, value in head.items()}
    return write_gguf(folder / "q4_k_m.gguf", arch, types=types, replace=replace)


@pytest.fixture(scope="module")
def source_tensors(source):
    return GGUFReader(str(source)).tensors


@pytest.fixture(scope="module")
def dequantized(folder, arch, source_tensors) -> Path:
    """The same file with every tensor replaced by gguf-py's dequantization of it, stored F32."""
    values = {t.name: dequantize(t.data, t.tensor_type) for t in source_tensors}
    path = write_gguf(folder / "dequantized.gguf", arch, replace=values)
    assert {t.name for t in GGUFReader(str(path)).tensors} == set(values)
    return path


@pytest.fixture(scope="module")
def package(folder, source) -> Path:
    spec = write_spec(folder / "q4_k_m.yaml", "q4-k-m", f"{{gguf: {source.name}}}", KEEP_SOURCE)
    return compile_spec(spec, folder / "pkg-q4_k_m")


@pytest.fixture(scope="module")
def float_package(folder, dequantized) -> Path:
    spec = write_spec(folder / "dequantized.yaml", "dequantized", f"{{gguf: {dequantized.name}}}")
    return compile_spec(spec, folder / "pkg-dequantized")


@pytest.fixture(scope="module")
def models(package):
    return load(package), load(package / "mtp")


def _graph_of(name: str, n_main: int) -> tuple[str, ...]:
    """Which graphs read a GGUF tensor: the head reads the embedding and the LM head too."""
    if name in ("token_embd.weight", "output.weight"):
        return ("model.onnx", "mtp/mtp.onnx")
    return ("mtp/mtp.onnx",) if name.startswith(f"blk.{n_main}.") else ("model.onnx",)


def _data_file_of(name: str, n_main: int) -> str:
    """Where a GGUF tensor's bytes are stored: once, the embedding and LM head in the head's file."""
    return "mtp/mtp.onnx.data" if "mtp/mtp.onnx" in _graph_of(name, n_main) else "model.onnx.data"


# ------------------------------------------------------------------------------------------- the file


def test_the_source_is_a_q4_k_m_mix(source_tensors):
    types = Counter(t.tensor_type.name for t in source_tensors if len(t.shape) > 1)
    # Q4_K: blk.0 7 (attn_gate, ssm_alpha, ssm_beta, ssm_out, ffn_gate / up / down), blk.2 6 (its
    # ffn_down is Q6_K), blk.1 and blk.3 7 each (attn_q / k / v / output, ffn_*), blk.4 (MTP) 6
    # (attn_q / k / output, ffn_gate / up, nextn.eh_proj), token_embd. Q5_K: attn_qkv. Q6_K: output,
    # blk.2 / blk.4 ffn_down, blk.4 attn_v. F32: ssm_conv1d.
    assert types == {"Q4_K": 34, "Q5_K": 2, "Q6_K": 4, "F32": 2}
    for t in source_tensors:
        if t.tensor_type in K_QUANTS:
            block, size = GGML_QUANT_SIZES[t.tensor_type]
            assert t.n_bytes == int(np.prod(t.shape)) // block * size, t.name


# ----------------------------------------------------------------------------------------- the package

# Bytes per weight of onnxruntime's exact form of each type (gguf-and-quantization.md §3.1), with
# float32 scales (the CPU package's io dtype) -- against the source's 144 / 176 / 210 bytes per 256:
#   Q4_K  MatMulNBits 4-bit, block 32, scale + float zero point: 0.5 + 2 * 4/32 = 0.75 (6 bits, x1.33)
#   Q4_K  embedding, GatherBlockQuantized 4-bit, scale + packed 4-bit zero point + per-block offset:
#         0.5 + 4/32 + 0.5/32 + 4/32 = 0.765625 (6.125 bits, x1.36)
#   Q5_K  MatMulNBits 8-bit (5-bit codes), block 32, scale + per-block offset: 1 + 2 * 4/32 = 1.25 (x1.82)
#   Q6_K  MatMulNBits 8-bit (6-bit codes), block 16, scale: 1 + 4/16 = 1.25 (10 bits, x1.52)
#   F32   4
# and the embedding and the LM head are stored once, in the head's mtp.onnx.data, which model.onnx
# reads them from too.
STORED_BYTES_PER_WEIGHT = {QT.Q4_K: 0.75, QT.Q5_K: 1.25, QT.Q6_K: 1.25, QT.F32: 4.0}
EMBEDDING_Q4_K_BYTES_PER_WEIGHT = 0.765625
ALIGNMENT_SLACK = 4096  # per .data file: padding between tensors


def _initializers(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    return {i.name: i for i in graph.initializer}


def _dense_float_weights(graph: onnx.GraphProto) -> list[str]:
    """Float initializers a MatMul multiplies by or a Gather looks up whose feature axis is a multiple of 256.

    Every 2-D weight of this model has K (row length) 256 or 512; a block form's per-block side
    tensors (the offset term's `[K/block, N]` / `[V, K/block]`) have 8 or 16 there.
    """
    inits = _initializers(graph)
    dense = []
    for node in graph.node:
        operand = {"MatMul": 1, "Gather": 0}.get(node.op_type)
        if operand is None or len(node.input) <= operand or node.input[operand] not in inits:
            continue
        t = inits[node.input[operand]]
        feature_axis = 0 if node.op_type == "MatMul" else 1
        if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16) and len(t.dims) == 2:
            if t.dims[feature_axis] % 256 == 0:
                dense.append(t.name)
    return dense


def test_every_k_quant_tensor_is_stored_block_quantized(package, source_tensors, arch):
    kquants = [t for t in source_tensors if t.tensor_type in K_QUANTS]
    # Weights each graph reads in block form: the embedding through GatherBlockQuantized, the rest through
    # MatMulNBits (projections of one input may share one, over their weights side by side).
    tables = Counter(g for t in kquants if t.name == "token_embd.weight" for g in _graph_of(t.name, arch.num_layers))
    weights = Counter()
    for t in kquants:
        if t.name != "token_embd.weight":
            for g in _graph_of(t.name, arch.num_layers):
                weights[g] += int(np.prod(t.shape))
    for relpath in ("model.onnx", "mtp/mtp.onnx"):
        graph = onnx.load(str(package / relpath), load_external_data=False).graph
        assert not _dense_float_weights(graph), (relpath, _dense_float_weights(graph))
        block_ops = [n for n in graph.node if n.op_type in ("MatMulNBits", "GatherBlockQuantized")]
        gathers = [n for n in block_ops if n.op_type == "GatherBlockQuantized"]
        assert len(gathers) == tables[relpath], relpath
        sizes = [{a.name: a.i for a in n.attribute} for n in block_ops if n.op_type == "MatMulNBits"]
        assert sum(a["K"] * a["N"] for a in sizes) == weights[relpath], relpath
        inits = _initializers(graph)
        data = [inits[n.input[0] if n.op_type == "GatherBlockQuantized" else n.input[1]] for n in block_ops]
        assert {t.data_type for t in data} == {onnx.TensorProto.UINT8}
        levels = {a.i for n in block_ops for a in n.attribute if a.name == "accuracy_level"}
        assert levels <= {0}, (relpath, levels)


def test_stored_bytes_are_those_of_the_exact_block_forms(package, source_tensors, arch):
    expected = Counter()
    for t in source_tensors:
        per = STORED_BYTES_PER_WEIGHT[t.tensor_type]
        if t.name == "token_embd.weight":
            per = EMBEDDING_Q4_K_BYTES_PER_WEIGHT
        expected[_data_file_of(t.name, arch.num_layers)] += per * int(np.prod(t.shape))
    source_bytes = sum(int(t.n_bytes) for t in source_tensors)
    assert sum(expected.values()) < 1.4 * source_bytes  # 1.37: the forms' overhead only, no second copy
    for data_file, size in expected.items():
        stored = (package / data_file).stat().st_size
        # a k-quant weight stored float32 instead takes 5.3x (Q4_K) or 3.2x (Q5_K, Q6_K) these bytes
        assert stored <= size + ALIGNMENT_SLACK, (data_file, stored, size)
    assert sum((package / f).stat().st_size for f in expected) >= sum(expected.values())  # nothing missing


# ------------------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_equals_the_package_of_gguf_py_dequantization(package, float_package, prompt):
    expected = greedy(load(float_package), list(prompt), STEPS)
    assert greedy(load(package), list(prompt), STEPS) == expected


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_mtp_decoding_equals_greedy_with_accepted_and_rejected_drafts(models, prompt, max_draft):
    main, head = models
    run = speculative(main, head, list(prompt), STEPS, max_draft)
    assert run.tokens == greedy(main, list(prompt), STEPS)
    assert run.accepted > 0 and run.rejected > 0, run
