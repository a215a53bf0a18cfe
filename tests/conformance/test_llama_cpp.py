"""Every family through llama.cpp's own converter (f32 and q8_0) and, where it drafts with the family's head,
llama.cpp's own runtime.

- The f32 GGUF reads as the release (the converter's f32 transforms are exact): every canonical tensor
  equals the fixture's, derived apart from mtpc's readers.
- onnxruntime-genai's greedy tokens on each file's package equal transformers' on the weights that file
  holds (`q8_0.file_weights`); og.MtpGenerator equals greedy for 1..4 drafts, and on f32 drafts and
  accepts what the numpy rendition with the fitted head does.
- llama.cpp's runtime (`llama-speculative-simple --spec-type draft-mtp`) decodes the f32 file as
  transformers does and accepts some of the fitted head's drafts on each file, and no more than chance from the same
  f32 file with the head's fc input halves swapped: the head sits where llama.cpp and mtpc both read it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf
from tests.clients import llama_cpp_runtime
from tests.fixtures.llama_cpp_tools import llama_cpp_binary, llama_quantize  # noqa: F401  (fixtures)
from tests.runtime import decoding
from tests.runtime.conftest import STEPS

from .conftest import OUTTYPES, assert_same
from .families import FAMILIES, family, simulated

# A family whose GGUF llama.cpp's converter writes but mtpc does not read yet says so (`unsupported`).
NAMES = sorted(n for n in FAMILIES if family(n).supports("llama.cpp converter"))
RUNTIME = sorted(n for n in NAMES if family(n).supports("llama.cpp runtime"))


@pytest.mark.parametrize("name", NAMES)
def test_the_f32_gguf_reads_as_the_release(ggufs, name):
    fam = family(name)
    ref = SourceRef("gguf", str(ggufs[name]["f32"]))
    info = gguf.describe(ref)
    assert (info.architecture.family, info.architecture.mtp_num_layers) == (fam.arch.family, 1)
    assert info.architecture.rope == fam.arch.rope and info.architecture.moe == fam.arch.moe
    store, expected = gguf.open_weights(ref, info), fam.store()
    assert sorted(store.names()) == sorted(expected.names())
    for n in expected.names():
        assert_same(store.read_float(n), expected.read_float(n), n)


@pytest.mark.parametrize("index", (0, 1))
@pytest.mark.parametrize("outtype", OUTTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_greedy_equals_transformers_on_the_files_weights(gguf_models, file_greedy, name, outtype, index):
    prompt = family(name).prompts[index]
    tokens = decoding.greedy(gguf_models[name, outtype][0], list(prompt), STEPS)
    assert tokens == file_greedy[name, outtype][prompt]


@pytest.mark.parametrize("name, outtype, max_draft",
                         [(n, o, d) for n in NAMES for o in OUTTYPES for d in family(n).draft_counts])
def test_mtp_decoding_equals_greedy(gguf_models, file_greedy, name, outtype, max_draft):
    fam = family(name)
    prompt = fam.prompts[0]
    main_model, head = gguf_models[name, outtype]
    run = decoding.speculative(main_model, head, list(prompt), STEPS, max_draft)
    assert run.tokens == file_greedy[name, outtype][prompt]
    if outtype == "f32":
        expected = simulated(name, prompt, STEPS, max_draft)
        assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
        assert run.accepted > 0 and run.rejected > 0, run


def _for_the_runtime(fam, path: Path, target: Path) -> Path:
    """The converter's file, with the keys the family's runtime would otherwise guess written (`llama_cpp_runtime_keys`)."""
    if not fam.llama_cpp_runtime_keys:
        return path
    from gguf import GGMLQuantizationType as QT

    from tests.fixtures.gguf_requantize import requantize

    return requantize(path, target, (), QT.F32, fields=fam.llama_cpp_runtime_keys)


@pytest.mark.parametrize("outtype", OUTTYPES)
@pytest.mark.parametrize("name", RUNTIME)
def test_llama_cpp_decodes_as_transformers_and_accepts_the_heads_drafts(
    llama_cpp_binary, conformance_dir, ggufs, file_greedy, name, outtype
):
    """f32: llama.cpp's tokens are transformers'. q8_0: llama.cpp's Q8_0 dot products quantize the activations
    to 8 bits as well, so its tokens leave transformers' (float activations on the file's weights) at the first
    near tie (measured: Qwen3-Next r2 at step 3); there its head must still have drafts accepted and rejected."""
    fam = family(name)
    prompt = fam.prompts[0]
    path = _for_the_runtime(fam, ggufs[name][outtype], conformance_dir / f"{name}-{outtype}-runtime.gguf")
    run = llama_cpp_runtime.speculative(path, fam.token_bytes(prompt), STEPS, 3, conformance_dir)
    if outtype == "f32":
        want = fam.token_bytes(file_greedy[name, outtype][prompt])
        generated = run.text.split(fam.token_bytes(prompt), 1)[-1]
        assert generated[: len(want)] == want, (generated, want, run.log[-3000:])
    assert run.drafted > 0 and 0 < run.accepted < run.drafted, (run.drafted, run.accepted, run.log[-3000:])


@pytest.mark.parametrize("name", RUNTIME)
def test_llama_cpp_accepts_no_more_than_chance_from_a_head_with_its_inputs_swapped(llama_cpp_binary, conformance_dir,
                                                                                   ggufs, name):
    """The control for the test above: with the fc's embedding and hidden halves swapped, llama.cpp accepts no
    more of the head's drafts than chance agreement gives (measured: GLM-4.5 0 of 60, Qwen3-Next 1 of 29, where
    the fitted head has about half accepted), so the drafts accepted there come from the head read as mtpc
    reads it."""
    from gguf import GGMLQuantizationType as QT

    from tests.fixtures.gguf_requantize import requantize

    fam = family(name)
    h = fam.arch.hidden_size
    swapped = requantize(ggufs[name]["f32"], conformance_dir / f"{name}-swapped.gguf", (), QT.F32,
                         edit={fam.eh_proj: lambda w: np.concatenate([w[:, h:], w[:, :h]], axis=1)},
                         fields=fam.llama_cpp_runtime_keys)
    run = llama_cpp_runtime.speculative(swapped, fam.token_bytes(fam.prompts[0]), STEPS, 3, conformance_dir)
    assert run.drafted > 0 and run.accepted * 10 <= run.drafted, (run.drafted, run.accepted, run.log[-3000:])


# The preset claims llama-quantize's choices where every FFN is dense and attention is Qwen's; MoE expert stacks
# take one form per layer in QMoE, and MLA's kv_b is no MatMul operand (weights/presets.py says what it does there).
DENSE = [n for n in NAMES if family(n).arch.moe is None and family(n).arch.mla is None]


@pytest.mark.parametrize("name", DENSE)
def test_the_q4_k_m_preset_chooses_as_llama_quantize_does(llama_quantize, conformance_dir, ggufs, releases, name):
    """llama-quantize's Q4_K_M of the converter's f32 file, read tensor by tensor, against what
    `quantization.default.preset: q4_k_m` decides for the same release, weight for weight: each type's stand-in
    form, or float. The tiny qwen35 fixture's rows of 64 and 128 take llama-quantize's fallbacks (Q5_0, Q8_0); the
    trained checkpoint's rows of 256 and 512 its k-quants."""
    from mtpc.pipeline.driver import build_ir

    q4_k_m = llama_cpp_runtime.quantize(ggufs[name]["f32"], conformance_dir / f"{name}-q4_k_m.gguf", "Q4_K_M")
    info = gguf.describe(SourceRef("gguf", str(q4_k_m)))
    # Each type's stand-in: Q4_K 4-bit blocks of 32, Q6_K 8-bit blocks of 16, Q5_0 / Q8_0 8-bit blocks of 32.
    forms = {"Q4_K": (4, 32), "Q6_K": (8, 16), "Q5_0": (8, 32), "Q8_0": (8, 32)}
    llama = {t.name: forms.get(t.encoding) for t in info.tensors if len(t.shape) == 2}
    spec = conformance_dir / f"{name}-preset.yaml"
    spec.write_text(f"mtpc: 1\nname: preset\nsource: {{hf: {releases[name].name}}}\n"
                    "quantization:\n  default: {preset: q4_k_m}\ntargets:\n  onnxruntime_genai: {execution_provider: cpu}\n")
    ours = {w.name: (w.form.bits, w.form.block_size) if w.form else None for w in build_ir(spec)[0].weights
            if w.role.value in ("linear", "embedding")}
    assert ours == llama
    assert len(set(ours.values())) > 1, ours
