"""GLM-4.5 GGUFs as llama.cpp's own converter writes them (`glm4moe`): mtpc compiles them, and they decode like
transformers, in onnxruntime-genai and in llama.cpp's own runtime.

The tiny Glm4MoeForCausalLM with its fitted MTP layer (qk-norm on) and a tiny GLM tokenizer goes through
`convert_hf_to_gguf.py` from the llama-cpp-python sdist at f32 and q8_0. gguf-py reads the files to pin the
keys and names mtpc relies on. The expected tokens are transformers' greedy tokens on the weights each file
holds: the original ones for f32, for q8_0 every tensor as gguf-py dequantizes it from the file (mapped
back to transformers' names by this test's own table), compiled with `keep: source` and float activations
so the Q8_0 blocks are carried into MatMulNBits / QMoE as stored.

llama.cpp's runtime (`llama-speculative-simple --spec-type draft-mtp`, tests/clients/llama_cpp_runtime.py)
decodes the same GGUFs with its own MTP drafter: its tokens must be transformers' greedy tokens and it
must accept drafts, which a head mapped wrongly (norms or the eh_proj halves swapped, the wrong block)
would not: the fitted head is right only where it was fitted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf
from tests.clients import hf_transformers, llama_cpp, llama_cpp_runtime
from tests.fixtures.fitted_head import simulate_speculative
from tests.fixtures.glm4moe_checkpoints import (
    PROMPTS,
    fitted_glm_store,
    fitted_glm_tensors,
    load_transformers_glm,
    piece_bytes,
    prompt_bytes,
)
from tests.fixtures.shared import in_ci
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


def _hf_name(gguf_name: str) -> str | list[str]:
    """The transformers name of a trunk tensor of llama.cpp's glm4moe (a list for a stack of 8 experts)."""
    globals_ = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
                "output_norm.weight": "model.norm.weight"}
    if gguf_name in globals_:
        return globals_[gguf_name]
    _, block, local = gguf_name.split(".", 2)
    p = f"model.layers.{block}."
    table = {
        "attn_norm.weight": "input_layernorm.weight", "post_attention_norm.weight": "post_attention_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
        "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
        "attn_output.weight": "self_attn.o_proj.weight", "attn_q_norm.weight": "self_attn.q_norm.weight",
        "attn_k_norm.weight": "self_attn.k_norm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
        "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
        "ffn_gate_inp.weight": "mlp.gate.weight", "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
        "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
        "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
        "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
    }
    if local in table:
        return p + table[local]
    proj = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj", "ffn_down_exps.weight": "down_proj"}
    return [f"{p}mlp.experts.{e}.{proj[local]}.weight" for e in range(8)]


def file_trunk(path: Path, num_layers: int) -> dict[str, np.ndarray]:
    """The trunk a GGUF holds, as gguf-py dequantizes it, under transformers' names."""
    out = {}
    for t in GGUFReader(path).tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= num_layers:
            continue
        shape = tuple(int(d) for d in reversed(t.shape))
        value = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        name = _hf_name(t.name)
        if isinstance(name, list):
            out.update(zip(name, value))
        else:
            out[name] = value
    return out


@pytest.fixture(scope="session")
def expected_greedy(glm_arch, glm_ggufs, transformers_greedy) -> dict[str, dict[tuple[int, ...], list[int]]]:
    """transformers' greedy tokens on the weights each file holds."""
    model = load_transformers_glm(glm_arch, file_trunk(glm_ggufs["q8_0"], glm_arch.num_layers))
    q8_0 = {p: hf_transformers.greedy(model, list(p), STEPS) for p in PROMPTS}
    return {"f32": transformers_greedy["qk_norm"], "q8_0": q8_0}


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


def test_the_f32_gguf_reads_as_the_checkpoint(glm_ggufs, glm_arch):
    ref = SourceRef("gguf", str(glm_ggufs["f32"]))
    info = gguf.describe(ref)
    arch = info.architecture
    assert (arch.family, arch.moe, arch.head_layout, arch.qk_norm, arch.attention_bias) == (
        "glm4moe", glm_arch.moe, glm_arch.head_layout, True, True)
    assert arch.tokens.eos == (2, 254, 255)  # <|endoftext|>, <|user|> (eot), <|observation|> (eom)
    store, expected = gguf.open_weights(ref, info), fitted_glm_store(glm_arch)
    assert sorted(store.names()) == sorted(expected.names())
    for name in expected.names():
        np.testing.assert_array_equal(store.read_float(name), expected.read_float(name), err_msg=name)


def test_a_half_present_nextn_block_is_refused_naming_what_is_missing(glm_workdir, glm_ggufs):
    from gguf import GGMLQuantizationType as QT

    from tests.fixtures.gguf_requantize import requantize

    missing = ("blk.3.nextn.hnorm.weight", "blk.3.exp_probs_b.bias")
    path = requantize(glm_ggufs["f32"], glm_workdir / "glm-half.gguf", (), QT.F32, omit=missing)
    unusable = gguf.describe(SourceRef("gguf", str(path))).architecture.unusable_head
    assert unusable is not None and not unusable.absent
    assert all(name in unusable.reason for name in missing), unusable.reason


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("outtype", OUTTYPES)
def test_greedy_equals_transformers(gguf_packages, expected_greedy, outtype, prompt):
    tokens = decoding.greedy(decoding.load(gguf_packages[outtype]), list(prompt), STEPS)
    assert tokens == expected_greedy[outtype][prompt]


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("outtype", OUTTYPES)
def test_mtp_decoding_equals_greedy(gguf_packages, expected_greedy, references, outtype, max_draft):
    package, prompt = gguf_packages[outtype], PROMPTS[0]
    run = decoding.speculative(decoding.load(package), decoding.load(package / "mtp"), list(prompt), STEPS, max_draft)
    assert run.tokens == expected_greedy[outtype][prompt]
    if outtype == "f32":
        expected = simulate_speculative(*references["qk_norm"], list(prompt), STEPS, max_draft)
        assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
        assert run.accepted > 0 and run.rejected > 0, run


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


@pytest.fixture(scope="session")
def llama_cpp_binary() -> Path:
    """Built here under CI (a fresh machine has none; minutes on two cores, once per machine); elsewhere a
    skip that says how to build it, so a local run is not held up by a compile it did not ask for."""
    binary = llama_cpp_runtime.binary()
    if not binary.is_file():
        if in_ci():
            log_path = llama_cpp_runtime.cache_dir().parent / "llama.cpp-runtime-build.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(log_path, "w") as log:
                    return llama_cpp_runtime.build(log)
            except (OSError, subprocess.CalledProcessError, llama_cpp.ConverterUnavailable) as error:
                pytest.fail(f"could not build llama.cpp's runtime ({error}); its log: {log_path}", pytrace=False)
        pytest.skip(f"llama.cpp's runtime is not built ({binary}); build it with: {llama_cpp_runtime.BUILD_COMMAND}")
    return binary


@pytest.mark.parametrize("outtype", OUTTYPES)
def test_llama_cpp_decodes_the_gguf_as_transformers_and_accepts_its_mtp_drafts(
    llama_cpp_binary, glm_workdir, glm_ggufs, expected_greedy, outtype
):
    prompt = PROMPTS[0]
    want = piece_bytes(expected_greedy[outtype][prompt])
    run = llama_cpp_runtime.speculative(glm_ggufs[outtype], prompt_bytes(prompt), STEPS, 3, glm_workdir)
    generated = run.text.split(prompt_bytes(prompt), 1)[-1]
    assert generated[: len(want)] == want, (generated, want, run.log[-3000:])
    assert run.drafted > 0 and 0 < run.accepted < run.drafted, run.log[-3000:]


def test_llama_cpp_accepts_no_draft_from_a_head_mapped_wrongly(llama_cpp_binary, glm_workdir, glm_ggufs):
    """The control for the test above: with the two halves of eh_proj swapped (embedding and hidden state
    read the wrong way round) llama.cpp accepts none of the fitted head's drafts, so drafts accepted there
    say the head's tensors are where llama.cpp and mtpc both read them."""
    from gguf import GGMLQuantizationType as QT

    from tests.fixtures.gguf_requantize import requantize

    h = 64
    swapped = requantize(glm_ggufs["f32"], glm_workdir / "glm-swapped.gguf", (), QT.F32,
                         edit={"blk.3.nextn.eh_proj.weight": lambda w: np.concatenate([w[:, h:], w[:, :h]], axis=1)})
    run = llama_cpp_runtime.speculative(swapped, prompt_bytes(PROMPTS[0]), STEPS, 3, glm_workdir)
    assert run.drafted > 0 and run.accepted == 0, run.log[-3000:]


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
