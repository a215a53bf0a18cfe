"""GLM-4.5 GGUFs as llama.cpp's own converter writes them (`glm4moe`): what is GLM's own.

The shared oracles (the f32 file reads as the release, greedy equals transformers on each file's weights,
MTP equals greedy, llama.cpp's own runtime accepting the head's drafts and its swapped-halves control) run in
tests/conformance/ for every family. Here: the keys and names the converter writes, a half-present nextn
block, the Q8_0 experts carried into QMoE as stored, and block types re-encoded from the f32 file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf
from tests.clients import llama_cpp
from tests.fixtures.glm4moe_checkpoints import PROMPTS
from tests.runtime import decoding
from tests.runtime.conftest import STEPS

from .conftest import compile_glm

OUTTYPES = ("f32", "q8_0")


@pytest.fixture(scope="session")
def glm_ggufs(glm_workdir, glm_checkpoints) -> dict[str, Path]:
    try:
        llama_cpp.converter_tree()
    except llama_cpp.ConverterUnavailable as error:  # fail, never skip: without it nothing here is tested
        pytest.fail(f"llama.cpp's converter is needed and could not be had: {error}", pytrace=False)
    outputs = {t: glm_workdir / f"glm-{t}.gguf" for t in OUTTYPES}
    return llama_cpp.convert(glm_checkpoints["qk_norm"], outputs, pre_tokenizer="glm4")


@pytest.fixture(scope="session")
def gguf_packages(glm_workdir, glm_ggufs) -> dict[str, Path]:
    # accuracy_level 0: compared with transformers' float forward on the file's values (level 4's int8
    # activations are not exact).
    keep = "quantization:\n  default: {keep: source, accuracy_level: 0}\n"
    return {t: compile_glm(glm_workdir, f"glm-gguf-{t}", f"{{gguf: {path.name}}}", keep if t == "q8_0" else "")
            for t, path in glm_ggufs.items()}


def test_the_converter_writes_glm4moe_as_mtpc_reads_it(glm_ggufs, glm_arch):
    reader = GGUFReader(glm_ggufs["f32"])
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.")}
    assert fields["general.architecture"] == "glm4moe"
    assert (fields["glm4moe.block_count"], fields["glm4moe.nextn_predict_layers"]) == (4, 1)
    assert (fields["glm4moe.expert_count"], fields["glm4moe.expert_used_count"]) == (8, 2)
    assert (fields["glm4moe.expert_group_count"], fields["glm4moe.expert_group_used_count"]) == (4, 2)
    assert (fields["glm4moe.leading_dense_block_count"], fields["glm4moe.expert_gating_func"]) == (1, 2)
    assert fields["glm4moe.expert_weights_scale"] == pytest.approx(2.5) and fields["glm4moe.expert_weights_norm"]
    assert (fields["glm4moe.attention.key_length"], fields["glm4moe.rope.dimension_count"]) == (32, 16)
    names = {t.name for t in reader.tensors}
    assert {"blk.3.nextn.eh_proj.weight", "blk.3.nextn.enorm.weight", "blk.3.nextn.hnorm.weight",
            "blk.3.nextn.shared_head_norm.weight", "blk.3.exp_probs_b.bias", "blk.3.ffn_gate_exps.weight",
            "blk.0.ffn_gate.weight", "blk.1.attn_q.bias", "blk.1.attn_q_norm.weight"} <= names
    assert "blk.0.ffn_gate_exps.weight" not in names and "blk.3.nextn.shared_head_head.weight" not in names
    eos = gguf.describe(SourceRef("gguf", str(glm_ggufs["f32"]))).architecture.tokens.eos
    assert eos == (2, 254, 255)  # <|endoftext|>, <|user|> (eot), <|observation|> (eom)


def test_a_half_present_nextn_block_is_refused_naming_what_is_missing(glm_workdir, glm_ggufs):
    from gguf import GGMLQuantizationType as QT

    from tests.fixtures.gguf_requantize import requantize

    missing = ("blk.3.nextn.hnorm.weight", "blk.3.exp_probs_b.bias")
    path = requantize(glm_ggufs["f32"], glm_workdir / "glm-half.gguf", (), QT.F32, omit=missing)
    unusable = gguf.describe(SourceRef("gguf", str(path))).architecture.unusable_head
    assert unusable is not None and not unusable.absent
    assert all(name in unusable.reason for name in missing), unusable.reason


def _initializers(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path), load_external_data=True)
    return {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}


def test_q8_0_experts_are_carried_into_qmoe_as_stored(glm_ggufs, gguf_packages, glm_arch):
    tensors = {t.name: t for t in GGUFReader(glm_ggufs["q8_0"]).tensors}
    report = json.loads((gguf_packages["q8_0"] / "quantization.json").read_text())
    experts = [w for w in report["weights"] if w["role"] == "experts"]
    assert len(experts) == 9 and {(w["source"], w["stored"]["kind"], w["stored"]["bits"], w["lossless"])
                                  for w in experts} == {("Q8_0", "QMoE", 8, True)}
    for graph, block, prefix in (("model.onnx", 2, "model.layers.2"), ("mtp/mtp.onnx", glm_arch.num_layers, "mtp.layers.0")):
        values = _initializers(gguf_packages["q8_0"] / graph)
        for proj, names in (("gate_up_proj", ("ffn_gate_exps", "ffn_up_exps")), ("down_proj", ("ffn_down_exps",))):
            codes = values[f"{prefix}.mlp.experts.{proj}.qweight"].astype(np.float32) - 128
            scales = values[f"{prefix}.mlp.experts.{proj}.scales"]
            stored = (codes.reshape(*scales.shape, 32) * scales[..., None]).reshape(codes.shape)
            expected = [dequantize(tensors[f"blk.{block}.{n}.weight"].data, tensors[f"blk.{block}.{n}.weight"].tensor_type)
                        for n in names]
            if proj == "gate_up_proj":  # interleaved rows g0, u0, g1, u1, ... (swiglu_fusion=1)
                np.testing.assert_array_equal(stored[:, 0::2], expected[0].reshape(stored[:, 0::2].shape))
                np.testing.assert_array_equal(stored[:, 1::2], expected[1].reshape(stored[:, 1::2].shape))
            else:
                np.testing.assert_array_equal(stored, expected[0].reshape(stored.shape))


# Block types whose blocks tile the tiny model's 64-wide rows (k-quants need 256; their carrying is
# the same code for every family, tested on Qwen3.5's 256-wide model), and what a `keep: source`
# expert stack becomes: carried into QMoE as stored (codes about the default zero point) or, with
# per-block minimums or offsets QMoE has no input for, dequantized for the float MoE op.
BLOCK_TYPES = {"Q4_0": ("QMoE", 4), "Q5_0": ("QMoE", 8), "IQ4_NL": ("QMoE", 8), "Q4_1": ("float", None),
               "Q5_1": ("float", None)}


def _encode(values: np.ndarray, qtype) -> np.ndarray:
    """gguf-py's quantizer, and for IQ4_NL (which it cannot encode) the nearest of the 16 levels to each
    value over the block's largest magnitude, in the layout gguf-py decodes."""
    from gguf import GGMLQuantizationType as QT
    from gguf.quants import quantize

    from tests.sources.gguf_block_encoders import IQ4_NL_VALUES, _fp16, _nib32

    if qtype != QT.IQ4_NL:
        return quantize(values, qtype)
    blocks = values.reshape(-1, 32).astype(np.float32)
    d = (np.abs(blocks).max(axis=1, keepdims=True) / 127).astype(np.float16).astype(np.float32)
    idx = np.abs(blocks[..., None] / np.where(d == 0, 1, d)[..., None] - IQ4_NL_VALUES).argmin(axis=-1)
    raw = np.stack([np.concatenate([_fp16(s), _nib32(q)]) for s, q in zip(d[:, 0], idx)])
    return raw.reshape(*values.shape[:-1], -1)


@pytest.mark.parametrize("qtype", sorted(BLOCK_TYPES))
def test_block_types_compile_exactly_and_decode(glm_workdir, glm_ggufs, glm_arch, capsys, qtype):
    """Every matmul and expert stack re-encoded `qtype`, compiled with `keep: source` and float activations:
    every weight stored losslessly, `mtpc verify` holds the graphs to the numpy reference on the file's own
    values, og greedy equals that reference where no int8 activations intervene (QMoE's 8-bit kernel
    quantizes them at every accuracy level), and MTP equals greedy."""
    from gguf import GGMLQuantizationType as QT

    from mtpc.cli.main import main
    from mtpc.reference.forward import DecoderReference
    from tests.fixtures.gguf_requantize import requantize

    path = requantize(glm_ggufs["f32"], glm_workdir / f"glm-{qtype}.gguf",
                      ("blk.*.attn_[qkvo]*.weight", "blk.*.ffn_*.weight", "blk.*.nextn.eh_proj.weight", "output.weight"),
                      QT[qtype], encode=_encode)
    package = compile_glm(glm_workdir, f"glm-{qtype}", f"{{gguf: {path.name}}}",
                          "quantization:\n  default: {keep: source, accuracy_level: 0}\n")
    report = json.loads((package / "quantization.json").read_text())
    experts = {(w["source"], w["stored"]["kind"], w["stored"].get("bits")) for w in report["weights"] if w["role"] == "experts"}
    kind, bits = BLOCK_TYPES[qtype]
    assert experts == {(qtype, kind, bits)}, experts
    assert all(w["lossless"] for w in report["weights"]), [w["name"] for w in report["weights"] if not w["lossless"]]
    assert main(["verify", str(package), "--spec", str(glm_workdir / f"glm-{qtype}.yaml")]) == 0, capsys.readouterr()
    main_model, head = decoding.load(package), decoding.load(package / "mtp")
    prompt = list(PROMPTS[1])
    greedy = decoding.greedy(main_model, prompt, STEPS)
    if bits != 8:
        ref = SourceRef("gguf", str(path))
        assert greedy == DecoderReference(glm_arch, gguf.open_weights(ref, gguf.describe(ref))).greedy(prompt, STEPS)
    assert decoding.speculative(main_model, head, prompt, STEPS, 2).tokens == greedy
