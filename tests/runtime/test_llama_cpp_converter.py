"""GGUFs written by llama.cpp's own converter compile, and decode like Hugging Face transformers.

The input is the tiny Qwen3.5 with the fitted MTP head (tests/fixtures/fitted_head.py) as a
Hugging Face folder with a tiny byte-level tokenizer, whose config gives the layer layout as
`layer_types` only (linear, full, linear, full), with no `full_attention_interval` key, as
Qwen3.5's own configs do. llama.cpp's `convert_hf_to_gguf.py` (vendored in the llama-cpp-python
sdist, tests/clients/llama_cpp.py) turns it into an f32 and a q8_0 GGUF. For such a config the
converter writes `qwen35.attention.recurrent_layers` from `layer_types` and also
`full_attention_interval = 4`, which is wrong for this layout: a reader that trusts the interval
builds the wrong model (or fails on a missing `blk.1.attn_qkv.weight`).

What is compared:
- f32: onnxruntime-genai greedy over the package compiled from the GGUF equals transformers'
  greedy over the original HF checkpoint (20 tokens). The converter's f32 transforms (norm + 1,
  -exp(A_log), tiled value heads, conv squeeze) are exact, so this is the same model.
- q8_0 (compiled with `keep: source`, so the Q8_0 blocks are carried into MatMulNBits as stored):
  onnxruntime-genai greedy equals transformers' greedy over the HF checkpoint whose matmul
  weights are the values the Q8_0 file holds (tests/clients/q8_0.py quantizes each original
  weight in the converter's layout with gguf-py, requires the GGUF's very bytes, and puts the
  dequantized values back in HF layout). Norms and the other F32 tensors are the originals.
- MTP: og.MtpGenerator with the compiled head gives exactly the greedy tokens for 1-4 draft
  tokens; for f32 it also drafts and accepts exactly what the numpy rendition of speculative
  decoding with the fitted head does, with drafts both accepted and rejected, so the head
  really is the converted one. transformers has no MTP head, so it is not part of that check.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from gguf import GGUFReader

from mtpc.emit.tokenizer import synthetic_tokenizer_files
from mtpc.ir import LayerKind
from tests.clients import hf_transformers, llama_cpp
from tests.clients.q8_0 import q8_0_weights
from tests.fixtures.fitted_head import (
    PROMPTS,
    fitted_raw_hf_tensors,
    simulate_speculative,
    write_fitted_hf_checkpoint,
)
from tests.fixtures.safetensors_writer import write_safetensors

from . import decoding
from .conftest import STEPS, compile_spec, write_spec

OUTTYPES = ("f32", "q8_0")


def write_converter_input(directory: Path, arch) -> Path:
    """The fitted checkpoint with tokenizer files, its layout given by `layer_types` alone."""
    directory = write_fitted_hf_checkpoint(directory, arch)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    config["text_config"].pop("full_attention_interval", None)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    for relpath, content in synthetic_tokenizer_files(arch):
        (directory / relpath).write_bytes(content)
    return directory


@pytest.fixture(scope="session")
def converter_input(workdir, arch) -> Path:
    return write_converter_input(workdir / "llama-cpp-input", arch)


@pytest.fixture(scope="session")
def ggufs(workdir, converter_input) -> dict[str, Path]:
    problem = None
    try:
        llama_cpp.converter_tree()
    except llama_cpp.ConverterUnavailable as error:
        problem = str(error)
    if problem is not None:  # fail, never skip: without it nothing here is tested
        pytest.fail(f"llama.cpp's converter is needed and could not be had: {problem}", pytrace=False)
    return llama_cpp.convert(converter_input, {t: workdir / f"llama-cpp-{t}.gguf" for t in OUTTYPES})


@pytest.fixture(scope="session")
def packages(workdir, ggufs) -> dict[str, Path]:
    built = {}
    for outtype, path in ggufs.items():
        # accuracy_level 0: the comparison is with transformers' float forward on the same Q8_0
        # values; the CPU profile's level 4 quantizes activations to int8, which is not exact.
        extra = "quantization:\n  default: {keep: source, accuracy_level: 0}\n" if outtype == "q8_0" else ""
        name = f"llama-cpp-{outtype}"
        spec = write_spec(workdir / f"{name}.yaml", name, f"{{gguf: {path.name}}}", extra)
        built[outtype] = compile_spec(spec, workdir / f"pkg-llama-cpp-{outtype}")
    return built


@pytest.fixture(scope="session")
def models(packages):
    return {t: (decoding.load(p), decoding.load(p / "mtp")) for t, p in packages.items()}


@pytest.fixture(scope="session")
def transformers_greedy(workdir, arch, converter_input, ggufs) -> dict[str, dict[tuple[int, ...], list[int]]]:
    """transformers' greedy tokens per prompt, on the weights each GGUF holds."""
    q8_0_dir = workdir / "llama-cpp-q8_0-as-hf"
    q8_0_dir.mkdir()
    (q8_0_dir / "config.json").write_bytes((converter_input / "config.json").read_bytes())
    tensors = q8_0_weights(fitted_raw_hf_tensors(arch), arch, ggufs["q8_0"])
    write_safetensors(q8_0_dir / "model.safetensors", tensors, float_dtype="F32")
    result = {}
    for outtype, folder in (("f32", converter_input), ("q8_0", q8_0_dir)):
        model = hf_transformers.load(folder)
        result[outtype] = {prompt: hf_transformers.greedy(model, list(prompt), STEPS) for prompt in PROMPTS}
    return result


def test_the_input_is_a_layout_interval_4_gets_wrong(arch, converter_input):
    text = json.loads((converter_input / "config.json").read_text(encoding="utf-8"))["text_config"]
    assert "full_attention_interval" not in text
    assert text["layer_types"] == [k.value for k in arch.layer_kinds]
    interval_4 = [(i + 1) % 4 == 0 for i in range(arch.num_layers)]
    assert [k is LayerKind.FULL_ATTENTION for k in arch.layer_kinds] != interval_4


def test_the_converter_writes_the_layer_list_and_a_wrong_interval(ggufs, arch):
    """What makes this input a regression test: both keys, disagreeing."""
    fields = GGUFReader(ggufs["f32"]).fields
    recurrent = fields["qwen35.attention.recurrent_layers"].contents()
    expected = [k is LayerKind.LINEAR_ATTENTION for k in arch.layer_kinds] + [False] * arch.mtp_num_layers
    assert recurrent == expected
    assert fields["qwen35.full_attention_interval"].contents() == 4
    assert fields["qwen35.nextn_predict_layers"].contents() == arch.mtp_num_layers


def test_q8_0_is_carried_into_matmulnbits(packages):
    for graph in ("model.onnx", "mtp/mtp.onnx"):
        nodes = onnx.load(str(packages["q8_0"] / graph), load_external_data=False).graph.node
        bits = {a.i for n in nodes if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "bits"}
        assert bits == {8}, graph


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("outtype", OUTTYPES)
def test_greedy_equals_transformers(models, transformers_greedy, outtype, prompt):
    main, _ = models[outtype]
    assert decoding.greedy(main, list(prompt), STEPS) == transformers_greedy[outtype][prompt]


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("outtype", OUTTYPES)
def test_mtp_decoding_equals_greedy(
    models, transformers_greedy, reference, head_reference, outtype, prompt, max_draft
):
    main, head = models[outtype]
    run = decoding.speculative(main, head, list(prompt), STEPS, max_draft)
    assert run.tokens == transformers_greedy[outtype][prompt]
    if outtype == "f32":
        expected = simulate_speculative(reference, head_reference, list(prompt), STEPS, max_draft)
        assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
        assert run.accepted > 0 and run.rejected > 0, run
