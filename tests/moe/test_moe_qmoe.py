"""Int4 experts through onnxruntime's QMoE: the package decodes, MTP equals its own greedy, and the
graphs match the numpy reference on the weights as quantized.

The int4 package uses the CPU profile's accuracy_level 4 (int8 activations, which the reference does
not model), so its decoding is checked against itself; a package with accuracy_level 0 keeps float
activations and `mtpc verify` compares its graphs with the reference on the dequantized weights.
"""

from __future__ import annotations

import json

import onnx
import pytest

from mtpc.cli.main import main
from mtpc.ir import WeightRole
from mtpc.weights.quant import expert_form
from mtpc.ir import QuantScheme
from mtpc.weights import TensorInfo
from tests.fixtures.fitted_head import PROMPTS
from tests.runtime import decoding
from tests.runtime.conftest import STEPS

from .conftest import compile_moe

INT4 = "quantization:\n  default: {bits: 4, block_size: 32}\n"
INT4_FLOAT_ACTIVATIONS = "quantization:\n  default: {bits: 4, block_size: 32, accuracy_level: 0}\n"


@pytest.fixture(scope="session")
def qmoe_package(moe_workdir, moe_release):
    return compile_moe(moe_workdir, "moe-int4", f"{{hf: {moe_release.name}}}", INT4)


@pytest.fixture(scope="session")
def qmoe_models(qmoe_package):
    return decoding.load(qmoe_package), decoding.load(qmoe_package / "mtp")


def test_experts_are_qmoe_int4_blocks(qmoe_package):
    for graph, layers in (("model.onnx", 4), ("mtp/mtp.onnx", 1)):
        model = onnx.load(str(qmoe_package / graph), load_external_data=False).graph
        qmoe = [n for n in model.node if n.op_type == "QMoE"]
        assert len(qmoe) == layers and not [n for n in model.node if n.op_type == "MoE"], graph
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in qmoe[0].attribute}
        assert (attrs["expert_weight_bits"], attrs["block_size"], attrs["k"], attrs["accuracy_level"]) == (4, 32, 2, 4)
        shapes = {i.name: tuple(i.dims) for i in model.initializer}
        prefix = "model.layers.0" if graph == "model.onnx" else "mtp.layers.0"
        assert shapes[f"{prefix}.mlp.experts.gate_up_proj.qweight"] == (8, 64, 32)  # [E, 2I, H * 4 / 8]
        assert shapes[f"{prefix}.mlp.experts.gate_up_proj.scales"] == (8, 64, 2)  # [E, 2I, H / 32]
        assert shapes[f"{prefix}.mlp.experts.down_proj.qweight"] == (8, 64, 16)  # [E, H, I * 4 / 8]
    report = json.loads((qmoe_package / "quantization.json").read_text())
    experts = [w for w in report["weights"] if w["role"] == WeightRole.EXPERTS.value]
    assert len(experts) == 3 * 5 and {w["stored"]["kind"] for w in experts} == {"QMoE"}


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_mtp_decoding_equals_its_own_greedy(qmoe_models, prompt, max_draft):
    main_model, head = qmoe_models
    greedy = decoding.greedy(main_model, list(prompt), STEPS)
    run = decoding.speculative(main_model, head, list(prompt), STEPS, max_draft)
    assert run.tokens == greedy and len(greedy) == STEPS
    assert run.proposed > 0


def test_qmoe_graphs_match_the_reference_on_the_quantized_weights(moe_workdir, moe_release, capsys):
    package = compile_moe(moe_workdir, "moe-int4-acc0", f"{{hf: {moe_release.name}}}", INT4_FLOAT_ACTIVATIONS)
    assert main(["verify", str(package), "--spec", str(moe_workdir / "moe-int4-acc0.yaml")]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "ok   main prefill logits" in out and "ok   mtp head logits" in out and "verify: ok" in out


@pytest.mark.parametrize(
    "scheme, form",
    [
        (QuantScheme(bits=4, block_size=32), (4, 32)),
        (QuantScheme(bits=8, block_size=16), (8, 16)),
        (QuantScheme(bits=None), None),
        (QuantScheme(bits=4, block_size=32, symmetric=False), None),  # QMoE zero points are not built
        (QuantScheme(bits=4, block_size=24), None),  # not a power of two
        (QuantScheme(bits=4, block_size=64), None),  # does not tile K = 32
        (QuantScheme(keep_source=True), None),
    ],
)
def test_expert_form(scheme, form):
    got = expert_form(TensorInfo("layers.0.mlp.experts.down_proj.weight", (8, 64, 32), "float32"), scheme)
    assert (None if got is None else (got.bits, got.block_size)) == form


def test_experts_of_one_layer_in_two_forms_are_refused_at_the_rules(moe_workdir, moe_release):
    from mtpc.util.diagnostics import MtpcError

    extra = INT4 + "  overrides:\n    - {match: layers.0.mlp.experts.up_proj.weight, bits: null}\n"
    with pytest.raises(MtpcError, match="experts are stored in one form"):
        compile_moe(moe_workdir, "moe-mixed", f"{{hf: {moe_release.name}}}", extra)
