"""Qwen3.5-MoE GGUFs as llama.cpp's own converter writes them (`qwen35moe`): what is the MoE family's own.

The shared oracles (the f32 file reads as the release, greedy equals transformers on each file's weights,
MTP equals greedy) run in tests/conformance/ for every family. Here: gguf-py pins the names and keys mtpc
relies on; the converter's q8_0 expert stacks go into QMoE as stored (8-bit codes shifted by 128, the block
scales), which the package's bytes must show against gguf-py's own dequantization, and the package decodes
with MTP equal to its greedy; Q4_0 expert stacks (the f32 file's, re-encoded by gguf-py's quantizer) go into
int4 QMoE as stored and, with float activations, decode as the numpy reference on the file's values.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from gguf.quants import dequantize
import pytest
from gguf import GGMLQuantizationType as QT, GGUFReader

from mtpc.ir import SourceRef
from mtpc.reference.forward import Qwen35Reference
from mtpc.sources.gguf import reader as gguf
from tests.fixtures.fitted_head import PROMPTS
from tests.fixtures.gguf_requantize import requantize
from tests.runtime import decoding
from tests.runtime.conftest import STEPS


from .conftest import compile_moe


def test_the_converter_writes_qwen35moe_as_mtpc_reads_it(moe_gguf, moe_arch):
    reader = GGUFReader(moe_gguf)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.")}
    assert fields["general.architecture"] == "qwen35moe"
    assert (fields["qwen35moe.expert_count"], fields["qwen35moe.expert_used_count"]) == (8, 2)
    assert fields["qwen35moe.expert_feed_forward_length"] == 32
    assert fields["qwen35moe.expert_shared_feed_forward_length"] == 64
    assert fields["qwen35moe.nextn_predict_layers"] == 1
    shapes = {t.name: tuple(int(d) for d in reversed(t.shape)) for t in reader.tensors}  # numpy order
    for block in (0, moe_arch.num_layers):  # a trunk block and the nextn block carry the same sparse FFN
        p = f"blk.{block}."
        assert shapes[p + "ffn_gate_inp.weight"] == (8, 64)
        assert shapes[p + "ffn_gate_exps.weight"] == shapes[p + "ffn_up_exps.weight"] == (8, 32, 64)
        assert shapes[p + "ffn_down_exps.weight"] == (8, 64, 32)
        assert shapes[p + "ffn_gate_shexp.weight"] == (64, 64)
        assert shapes[p + "ffn_gate_inp_shexp.weight"] == (1, 64)


@pytest.fixture(scope="session")
def q8_0_package(moe_workdir, moe_ggufs) -> Path:
    return compile_moe(moe_workdir, "moe-q8_0", f"{{gguf: {moe_ggufs['q8_0'].name}}}",
                       "quantization:\n  default: {keep: source}\n")


def _initializers(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path), load_external_data=True)
    return {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}


def test_q8_0_experts_are_carried_into_qmoe_as_stored(moe_ggufs, q8_0_package, moe_arch):
    reader = GGUFReader(moe_ggufs["q8_0"])
    tensors = {t.name: t for t in reader.tensors}
    report = json.loads((q8_0_package / "quantization.json").read_text())
    experts = [w for w in report["weights"] if w["role"] == "experts"]
    assert {(w["source"], w["stored"]["kind"], w["stored"]["bits"], w["lossless"]) for w in experts} == {
        ("Q8_0", "QMoE", 8, True)
    }
    for graph, block, prefix in (("model.onnx", 2, "model.layers.2"), ("mtp/mtp.onnx", moe_arch.num_layers, "mtp.layers.0")):
        values = _initializers(q8_0_package / graph)
        for proj, gguf_names in (("gate_up_proj", ("ffn_gate_exps", "ffn_up_exps")), ("down_proj", ("ffn_down_exps",))):
            codes = values[f"{prefix}.mlp.experts.{proj}.qweight"].astype(np.float32) - 128
            scales = values[f"{prefix}.mlp.experts.{proj}.scales"]
            stored = (codes.reshape(*scales.shape, 32) * scales[..., None]).reshape(codes.shape)
            expected = [dequantize(tensors[f"blk.{block}.{n}.weight"].data, tensors[f"blk.{block}.{n}.weight"].tensor_type)
                        for n in gguf_names]
            if proj == "gate_up_proj":
                np.testing.assert_array_equal(stored[:, 0::2], expected[0].reshape(stored[:, 0::2].shape))
                np.testing.assert_array_equal(stored[:, 1::2], expected[1].reshape(stored[:, 1::2].shape))
            else:
                np.testing.assert_array_equal(stored, expected[0].reshape(stored.shape))


@pytest.mark.parametrize("max_draft", [1, 3])
def test_q8_0_package_mtp_equals_its_greedy(q8_0_package, max_draft):
    main_model, head = decoding.load(q8_0_package), decoding.load(q8_0_package / "mtp")
    prompt = list(PROMPTS[1])  # PROMPTS[0]'s int8-activation greedy continuation reaches eos at once
    greedy = decoding.greedy(main_model, prompt, STEPS)
    assert len(greedy) == STEPS
    assert decoding.speculative(main_model, head, prompt, STEPS, max_draft).tokens == greedy


@pytest.fixture(scope="session")
def q4_0_experts_gguf(moe_workdir, moe_gguf) -> Path:
    """The converter's f32 file with its expert stacks re-encoded Q4_0 by gguf-py (no llama-quantize here)."""
    return requantize(moe_gguf, moe_workdir / "moe-q4_0-experts.gguf", ("blk.*.ffn_*_exps.weight",), QT.Q4_0)


def test_q4_0_experts_decode_as_the_reference_on_the_files_values(moe_workdir, q4_0_experts_gguf, moe_arch):
    """Q4_0 experts carried into int4 QMoE with float activations: og greedy equals the numpy reference
    run on gguf-py's dequantization of the very file, and MTP equals greedy."""
    package = compile_moe(moe_workdir, "moe-q4_0-experts", f"{{gguf: {q4_0_experts_gguf.name}}}",
                          "quantization:\n  default: {keep: source, accuracy_level: 0}\n")
    report = json.loads((package / "quantization.json").read_text())
    experts = [w for w in report["weights"] if w["role"] == "experts"]
    assert {(w["source"], w["stored"]["kind"], w["stored"]["bits"], w["lossless"]) for w in experts} == {
        ("Q4_0", "QMoE", 4, True)
    }
    ref = SourceRef("gguf", str(q4_0_experts_gguf))
    reference = Qwen35Reference(moe_arch, gguf.open_weights(ref, gguf.describe(ref)))
    main_model, head = decoding.load(package), decoding.load(package / "mtp")
    for prompt in PROMPTS:
        greedy = decoding.greedy(main_model, list(prompt), STEPS)
        assert greedy == reference.greedy(list(prompt), STEPS)
        assert decoding.speculative(main_model, head, list(prompt), STEPS, 2).tokens == greedy
