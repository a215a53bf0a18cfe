"""Quantized builds: MatMulNBits / GatherBlockQuantized wiring is exact against the reference run on the
same dequantized weights, and int4 / int8 stay close to the float model."""

import numpy as np
import onnx
import pytest

from mtpc.ir import QuantizationPlan, QuantOverride, QuantScheme
from mtpc.weights.quant import quantize_linear
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from mtpc.sources.random_weights import seeded_store
from mtpc.weights import ArrayWeightStore, QuantizedTensor, TensorInfo

from .tiny import ORT_HEAD_FILE, emit, empty_state, make_ir, run, session

PROMPT = np.array([[3, 17, 42, 9, 250, 1, 77]], np.int64)


def is_linear(name: str, value: np.ndarray) -> bool:
    return value.ndim == 2 and name != "embed_tokens.weight"


def dequantized(store: ArrayWeightStore, bits: int, block_size: int, symmetric: bool = True) -> ArrayWeightStore:
    """What a quantized build computes with: every linear weight through quantize -> dequantize."""
    out = {}
    for name in store.names():
        w = store.read_float(name)
        quantized = is_linear(name, w)
        out[name] = quantize_linear(w, bits, block_size, symmetric=symmetric).dequantize() if quantized else w
    return ArrayWeightStore(out)


class QuantizedSourceStore(ArrayWeightStore):
    """A store that, like a GGUF source, hands some tensors out already quantized."""

    def __init__(self, tensors: dict, quantized: dict[str, QuantizedTensor]):
        super().__init__(tensors)
        self._quantized = quantized

    def info(self, name):
        if name in self._quantized:
            q = self._quantized[name]
            return TensorInfo(name, q.shape, q.source_type, quantized=True, bits=q.bits, block_size=q.block_size,
                              has_zero_points=q.zero_points is not None)
        return super().info(name)

    def read(self, name):
        return self._quantized.get(name) or super().read(name)

    def read_float(self, name):
        return self._quantized[name].dequantize() if name in self._quantized else super().read_float(name)


def feeds(sess, ids):
    b, s = ids.shape
    return {"input_ids": ids, "attention_mask": np.ones((b, s), np.int64),
            "position_ids": np.broadcast_to(np.arange(s), (3, b, s)).astype(np.int64), **empty_state(sess, b)}


@pytest.fixture(scope="module")
def store(arch):
    return seeded_store(arch, 1)


# Random weights have no redundancy, so 4-bit rounding moves logits visibly; the float model must still be
# clearly recognisable (correlation), and 8-bit nearly identical.
@pytest.mark.parametrize(
    "bits, block_size, symmetric, min_correlation",
    [(4, 32, True, 0.9), (8, 32, True, 0.999), (4, 32, False, 0.9), (8, 64, False, 0.999)],
)
def test_quantized_main_and_head_are_exact_on_dequantized_weights(arch, store, tmp_path, bits, block_size,
                                                                   symmetric, min_correlation):
    scheme = QuantScheme(bits=bits, block_size=block_size, accuracy_level=0, symmetric=symmetric)
    emit(make_ir(arch, quantization=QuantizationPlan(default=scheme)), store, tmp_path / "pkg")
    main = session(tmp_path / "pkg" / "model.onnx")
    out = run(main, feeds(main, PROMPT))
    effective = dequantized(store, bits, block_size, symmetric)
    logits, post, _, _ = Qwen35Reference(arch, effective).forward(PROMPT)
    np.testing.assert_allclose(out["logits"], logits, atol=2e-4, rtol=0)
    float_logits, _, _, _ = Qwen35Reference(arch, store).forward(PROMPT)
    correlation = np.corrcoef(out["logits"].ravel(), float_logits.ravel())[0, 1]
    assert correlation > min_correlation

    model = onnx.load(tmp_path / "pkg" / "model.onnx", load_external_data=False)
    nbits = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    assert nbits and not any(n.op_type == "MatMul" for n in model.graph.node)
    assert {a.i for n in nbits for a in n.attribute if a.name == "bits"} == {bits}

    head = session(tmp_path / "pkg" / ORT_HEAD_FILE)
    ids, seed = PROMPT[:, 1:], post[:, :-1].astype(np.float32)
    head_out = run(head, {**feeds(head, ids), "hidden_states": seed})
    head_logits, _, _ = MtpHeadReference(arch, effective).forward(ids, seed, np.arange(6)[None])
    np.testing.assert_allclose(head_out["logits"], head_logits, atol=2e-4, rtol=0)


def test_source_quantized_tensors_are_kept_as_stored(arch, store, tmp_path):
    """A GGUF-style 4-bit embedding stays quantized (GatherBlockQuantized) and a 4-bit linear weight with
    explicit zero points is carried over bit-exact when the plan keeps the source encoding."""
    embed = quantize_linear(store.read_float("embed_tokens.weight"), 4, 32)
    up = quantize_linear(store.read_float("layers.0.mlp.up_proj.weight"), 4, 32)
    up = QuantizedTensor(4, 32, up.shape, up.data, up.scales, np.full((up.shape[0], 1), 0x88, np.uint8), "Q4_0")
    tensors = {n: store.read(n) for n in store.names()}
    source = QuantizedSourceStore(tensors, {"embed_tokens.weight": embed, "layers.0.mlp.up_proj.weight": up})
    keep = QuantScheme(keep_source=True, accuracy_level=0)  # float activations: exact
    plan = QuantizationPlan(overrides=(QuantOverride("embed_tokens.weight", keep),
                                       QuantOverride("layers.0.mlp.up_proj.weight", keep)))
    emit(make_ir(arch, heads=(), quantization=plan), source, tmp_path / "pkg")
    model = onnx.load(tmp_path / "pkg" / "model.onnx", load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("GatherBlockQuantized") == 1 and ops.count("MatMulNBits") == 1
    sess = session(tmp_path / "pkg" / "model.onnx")
    out = run(sess, feeds(sess, PROMPT))
    effective = ArrayWeightStore({n: source.read_float(n) for n in source.names()})
    logits, _, _, _ = Qwen35Reference(arch, effective).forward(PROMPT)
    np.testing.assert_allclose(out["logits"], logits, atol=1e-4, rtol=0)


def test_source_quantized_embedding_is_dequantized_unless_kept(arch, store, tmp_path):
    embed = quantize_linear(store.read_float("embed_tokens.weight"), 8, 32)
    source = QuantizedSourceStore({n: store.read(n) for n in store.names()}, {"embed_tokens.weight": embed})
    emit(make_ir(arch, heads=()), source, tmp_path / "pkg")
    model = onnx.load(tmp_path / "pkg" / "model.onnx", load_external_data=False)
    assert "GatherBlockQuantized" not in {n.op_type for n in model.graph.node}
    sess = session(tmp_path / "pkg" / "model.onnx")
    out = run(sess, feeds(sess, PROMPT))
    effective = ArrayWeightStore({n: source.read_float(n) for n in source.names()})
    logits, _, _, _ = Qwen35Reference(arch, effective).forward(PROMPT)
    np.testing.assert_allclose(out["logits"], logits, atol=1e-4, rtol=0)


def test_a_float_embedding_is_quantized_on_request(arch, store, tmp_path):
    # Only an override quantizes the embedding (a default's bits are meant for MatMul weights).
    plan = QuantizationPlan(overrides=(QuantOverride("embed_tokens.weight", QuantScheme(bits=4, accuracy_level=0)),))
    emit(make_ir(arch, quantization=plan), store, tmp_path / "pkg")
    model = onnx.load(tmp_path / "pkg" / "model.onnx", load_external_data=False)
    assert [n for n in model.graph.node if n.op_type == "GatherBlockQuantized"]
    main = session(tmp_path / "pkg" / "model.onnx")
    out = run(main, feeds(main, PROMPT))
    tensors = {name: store.read_float(name) for name in store.names()}
    tensors["embed_tokens.weight"] = quantize_linear(tensors["embed_tokens.weight"], 4, 32).dequantize()
    logits, _, _, _ = Qwen35Reference(arch, ArrayWeightStore(tensors)).forward(PROMPT)
    np.testing.assert_allclose(out["logits"], logits, atol=2e-4, rtol=0)

