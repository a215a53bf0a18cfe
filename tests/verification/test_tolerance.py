"""`mtpc verify` tolerances: each branch of `tolerance_for`, an int4 package that passes intact and fails
with one damaged MatMulNBits weight or a few damaged scales (the reference shares the weights' rounding, so a
quantized build gets its I/O dtype's bound, which must not hide a broken weight), and a Q4_0 GGUF kept as the
source stores it (quantized though the plan sets no bits)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from mtpc.cli.main import main
from mtpc.verification.tolerance import AsBuiltWeights, strict_greedy, tolerance_for
from mtpc.pipeline.driver import build_ir
from mtpc.sources import open_weights
from mtpc.ir import ModelIR, Precision, QuantizationPlan, QuantOverride, QuantScheme
from mtpc.sources.random_weights import seeded_store
from mtpc.weights import TensorInfo
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import MIXED_TYPES, write_gguf
from tests.fixtures.package_files import remanifest
from tests.graphs.tiny import make_ir

TINY = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml"
FLOAT32 = np.zeros(3, np.float32)
FLOAT16 = np.zeros(3, np.float16)


def build(io_dtype: str = "float32", quantization: QuantizationPlan = QuantizationPlan()) -> ModelIR:
    return make_ir(tiny_arch(), io_dtype=io_dtype, quantization=quantization)


# accuracy_level 0 where the tight branches are tested: unset, the CPU profile's 4 rounds the activations.
INT4 = QuantizationPlan(default=QuantScheme(bits=4, accuracy_level=0))
INT4_PROFILE_ACCURACY = QuantizationPlan(default=QuantScheme(bits=4))
INT8_OVERRIDE_ONLY = QuantizationPlan(
    default=QuantScheme(accuracy_level=0), overrides=(QuantOverride("layers.*.mlp.*", QuantScheme(bits=8, accuracy_level=0)),)
)
KEEP_SOURCE = QuantizationPlan(default=QuantScheme(keep_source=True, accuracy_level=0))
INT4_INT8_ACTIVATIONS = QuantizationPlan(default=QuantScheme(bits=4, accuracy_level=4))
INT8_ACTIVATIONS_ON_AN_OVERRIDE = QuantizationPlan(
    overrides=(QuantOverride("layers.*.mlp.*", QuantScheme(bits=8, accuracy_level=4)),)
)
FLOAT_WITH_ACCURACY_LEVEL = QuantizationPlan(default=QuantScheme(accuracy_level=4))  # no MatMulNBits to apply it
FLOAT_STORE = seeded_store(tiny_arch(), 0)


class Q4SourceStore:
    """The float store, except that one projection is stored Q4_0 by the source (as a GGUF would)."""

    QUANTIZED = "layers.0.mlp.up_proj.weight"

    def names(self):
        return FLOAT_STORE.names()

    def info(self, name):
        info = FLOAT_STORE.info(name)
        if name == self.QUANTIZED:
            return TensorInfo(name, info.shape, "Q4_0", quantized=True, bits=4, block_size=32)
        return info


@pytest.mark.parametrize(
    "ir, output, bound",
    [
        (build(), FLOAT32, 1e-3),  # float weights, float32 activations: close to the reference
        (build(), FLOAT16, 4e-3),  # ... with float16 logits (the CPU profile): one float16 rounding more
        (build("float16"), FLOAT16, 3e-2),  # float16 activations throughout
        (build("float16"), FLOAT32, 3e-2),
        # The reference computes with the weights as built: quantized builds get their I/O dtype's bound.
        (build(quantization=INT4), FLOAT32, 1e-3),
        (build(quantization=INT4), FLOAT16, 4e-3),
        (build(quantization=INT8_OVERRIDE_ONLY), FLOAT32, 1e-3),  # quantized only by an override
        (build("float16", INT4), FLOAT16, 3e-2),
        (build(quantization=KEEP_SOURCE), FLOAT32, 1e-3),  # a float source kept as it is stays float
        # accuracy_level > 0: MatMulNBits rounds the activations as well, which the reference does not model.
        (build(quantization=INT4_INT8_ACTIVATIONS), FLOAT32, 1e-1),
        (build("float16", INT4_INT8_ACTIVATIONS), FLOAT16, 1e-1),
        (build(quantization=INT8_ACTIVATIONS_ON_AN_OVERRIDE), FLOAT32, 1e-1),
        (build(quantization=FLOAT_WITH_ACCURACY_LEVEL), FLOAT32, 1e-3),
        (build(quantization=INT4_PROFILE_ACCURACY), FLOAT32, 1e-1),  # the CPU profile's accuracy_level 4
    ],
)
def test_tolerance_by_build(ir, output, bound):
    assert ir.precision == Precision(io_dtype=ir.precision.io_dtype)
    assert tolerance_for(ir, FLOAT_STORE, None)(output) == bound


@pytest.mark.parametrize(
    "ir, strict",
    [
        (build(), True),
        (build(quantization=INT4), True),  # same weights as the reference: same greedy tokens
        (build(quantization=INT8_OVERRIDE_ONLY), True),
        (build("float16"), False),
        (build("float16", INT4), False),
        (build(quantization=INT4_INT8_ACTIVATIONS), False),
        (build(quantization=FLOAT_WITH_ACCURACY_LEVEL), True),
    ],
)
def test_greedy_tokens_must_match_where_the_bound_is_tight(ir, strict):
    assert strict_greedy(ir, FLOAT_STORE) is strict


@pytest.mark.parametrize(
    "quantization, bound",
    [(KEEP_SOURCE, 1e-3), (QuantizationPlan(default=QuantScheme(bits=4, block_size=32, accuracy_level=0)), 1e-3),
     (QuantizationPlan(), 1e-3),  # kept, re-encoded alike, or dequantized to float: all as the reference has them
     (QuantizationPlan(default=QuantScheme(keep_source=True, accuracy_level=4)), 1e-1)],  # kept, int8 activations
)
def test_tolerance_of_a_source_quantized_weight(quantization, bound):
    assert tolerance_for(build(quantization=quantization), Q4SourceStore(), None)(FLOAT32) == bound


@pytest.mark.parametrize("ir", [build(), build("float16"), build(quantization=INT4)])
def test_atol_overrides_every_branch(ir):
    assert tolerance_for(ir, FLOAT_STORE, 0.25)(FLOAT32) == 0.25
    assert tolerance_for(ir, FLOAT_STORE, 0.0)(FLOAT16) == 0.0  # 0 is a bound, not "unset"


def test_the_quantized_reference_uses_the_weights_as_built():
    # Computed here from the op's definition (symmetric blocks of 32 along K, zero point 8, scale absmax / 7),
    # not through mtpc.weights.quant: what MatMulNBits multiplies by.
    store = seeded_store(tiny_arch(), 3)
    plan = QuantizationPlan(default=QuantScheme(bits=4), overrides=(QuantOverride("lm_head.weight", QuantScheme()),))
    built = AsBuiltWeights(store, plan)
    w = store.read_float("layers.0.mlp.up_proj.weight")
    blocks = w.reshape(w.shape[0], -1, 32)
    scale = np.abs(blocks).max(-1, keepdims=True) / 7
    want = (np.clip(np.rint(blocks / scale), -8, 7) * scale).reshape(w.shape)
    got = built.read_float("layers.0.mlp.up_proj.weight")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert np.abs(got - w).max() > 1e-3  # really rounded
    for kept in ("lm_head.weight", "embed_tokens.weight", "norm.weight", "layers.0.linear_attn.conv1d.weight"):
        np.testing.assert_array_equal(built.read_float(kept), store.read_float(kept), err_msg=kept)
    assert list(built.names()) == list(store.names())


# ----------------------------------------------------------------------------- int4 end to end


def int4_spec(folder: Path) -> Path:
    """The tiny spec with int4 MatMulNBits weights (lm_head kept float), onnxruntime-genai on CPU only.

    accuracy_level 0: float activations, so verify's bound is the tight one these tests are about."""
    text = TINY.read_text("utf-8")
    onnx_genai = re.search(r"  onnx_genai:\n    layout: flat.*\n", text)
    assert "  default: {bits: null}\n" in text and onnx_genai
    text = text.replace(
        "  default: {bits: null}\n",
        "  default: {bits: 4, block_size: 32, accuracy_level: 0}\n  overrides:\n    - {match: lm_head.weight, bits: null}\n",
    )
    text = text.replace(onnx_genai.group(0), "")
    spec = folder / "int4.yaml"
    spec.write_text(text, "utf-8")
    return spec


@pytest.fixture(scope="module")
def int4_package(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("verify-int4")
    spec = int4_spec(folder)
    package = folder / "pkg"
    assert main(["compile", "-q", str(spec), "-o", str(package)]) == 0
    return package, spec


def verify_json(package: Path, spec: Path, capsys) -> tuple[int, dict]:
    code = main(["verify", "-q", str(package), "--spec", str(spec), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def matmul_nbits_weights(model_path: Path) -> list[onnx.TensorProto]:
    """The packed weight (input B) initializers of the MatMulNBits nodes, in graph order."""
    model = onnx.load(str(model_path), load_external_data=False)
    initializers = {t.name: t for t in model.graph.initializer}
    return [initializers[n.input[1]] for n in model.graph.node if n.op_type == "MatMulNBits"]


def external_range(tensor: onnx.TensorProto) -> tuple[str, int, int]:
    entries = {e.key: e.value for e in tensor.external_data}
    return entries["location"], int(entries.get("offset", 0)), int(entries["length"])


def test_an_intact_int4_package_verifies(int4_package, capsys):
    package, spec = int4_package
    cfg = json.loads((package / "genai_config.json").read_text("utf-8"))
    assert cfg["model"]["decoder"]["session_options"]["provider_options"] == []  # CPU
    assert matmul_nbits_weights(package / "model.onnx")  # really quantized
    code, report = verify_json(package, spec, capsys)
    assert code == 0 and report["ok"], report["checks"]
    compared = [c for c in report["checks"] if "bound" in c]
    assert {c["check"] for c in compared} >= {"main prefill logits", "main step logits", "mtp head logits"}
    assert all(c["bound"] > 0 for c in compared)


def test_one_damaged_matmul_nbits_weight_fails_verify(int4_package, tmp_path, capsys):
    package, spec = int4_package
    damaged = tmp_path / "pkg"
    copy_tree(package, damaged)
    # layer 1's MLP down projection: an ordinary weight in the middle of the trunk
    (weight,) = [t for t in matmul_nbits_weights(damaged / "model.onnx") if "layers.1." in t.name and "down" in t.name]
    location, offset, length = external_range(weight)
    data = bytearray((damaged / location).read_bytes())
    assert offset + length <= len(data)
    data[offset : offset + length] = bytes(b ^ 0xFF for b in data[offset : offset + length])  # q -> 15 - q
    (damaged / location).write_bytes(bytes(data))
    remanifest(damaged)  # as if compile had written these weights: the manifest alone would flag the edit

    code, report = verify_json(damaged, spec, capsys)
    assert code == 1 and not report["ok"]
    failed = {c["check"] for c in report["checks"] if not c["ok"]}
    assert {"main prefill logits", "main step logits"} <= failed
    prefill = next(c for c in report["checks"] if c["check"] == "main prefill logits")
    assert prefill["max_abs_diff"] > 2 * prefill["bound"]  # clearly outside, not at the edge


def test_a_few_damaged_matmul_nbits_scales_fail_verify(int4_package, tmp_path, capsys):
    """The reviewer's case: 32 scales of one layer's projection times 1.5 (a ~0.13 logit error) passed
    under the old quantized bound of 1e-1; with the reference on the as-built weights it must fail."""
    package, spec = int4_package
    damaged = tmp_path / "pkg"
    copy_tree(package, damaged)
    model = onnx.load(str(damaged / "model.onnx"), load_external_data=False)
    initializers = {t.name: t for t in model.graph.initializer}
    # The last layer's MLP down projection: the damage reaches the logits through one residual add, no more.
    (node,) = [n for n in model.graph.node if n.op_type == "MatMulNBits" and "layers.3." in n.input[1] and "down" in n.input[1]]
    scales = initializers[node.input[2]]
    assert scales.name.endswith("_scales")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(scales.data_type)
    location, offset, length = external_range(scales)
    data = bytearray((damaged / location).read_bytes())
    part = np.frombuffer(bytes(data[offset : offset + length]), dtype).copy()
    assert part.size > 32
    part[:32] *= 1.5
    data[offset : offset + length] = part.tobytes()
    (damaged / location).write_bytes(bytes(data))
    remanifest(damaged)  # as if compile had written these weights: the manifest alone would flag the edit

    code, report = verify_json(damaged, spec, capsys)
    assert code == 1 and not report["ok"], report["checks"]
    prefill = next(c for c in report["checks"] if c["check"] == "main prefill logits")
    assert not prefill["ok"] and prefill["max_abs_diff"] > 2 * prefill["bound"]
    # The damage is subtle: the old quantized bound (1e-1 relative) let it through.
    assert main(["verify", "-q", str(damaged), "--spec", str(spec), "--format", "json", "--atol", "0.1"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]


# ----------------------------------------------------------------------------- a Q4_0 GGUF kept as stored

KEEP_SOURCE_SPEC = """\
mtpc: 1
name: tiny-q4-gguf
source: {gguf: q4.gguf}
quantization:
  default: {keep: source, accuracy_level: 0}
targets:
  onnxruntime_genai: {version: "0.18.0", execution_provider: cpu, attention: dense, max_draft_tokens: 4}
"""


def test_a_kept_q4_0_gguf_verifies_with_the_quantized_bound(tmp_path, capsys):
    write_gguf(tmp_path / "q4.gguf", tiny_arch(), types=MIXED_TYPES)
    spec = tmp_path / "q4.yaml"
    spec.write_text(KEEP_SOURCE_SPEC, "utf-8")
    package = tmp_path / "pkg"
    assert main(["compile", "-q", str(spec), "-o", str(package)]) == 0
    capsys.readouterr()
    assert matmul_nbits_weights(package / "model.onnx")  # the source's blocks, kept quantized
    # The plan sets no bits, yet the package computes with MatMulNBits; the reference dequantizes the
    # source's blocks too, so the float32 bound and strict greedy tokens apply.
    ir, info = build_ir(spec)
    store = open_weights(ir.source, info)
    try:
        assert tolerance_for(ir, store, None)(FLOAT32) == 1e-3
        assert strict_greedy(ir, store)
    finally:
        store.close()
    code, report = verify_json(package, spec, capsys)
    assert code == 0 and report["ok"], report["checks"]
    compared = [c for c in report["checks"] if "bound" in c]
    assert {c["check"] for c in compared} >= {"main prefill logits", "main step logits", "mtp head logits"}


def copy_tree(source: Path, target: Path) -> None:
    for path in sorted(source.rglob("*")):
        if path.is_file():
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(path.read_bytes())
