"""The same weights through different sources compile to packages that compute the same thing (issue 4).

The fitted tiny model is written as a float32 Hugging Face checkpoint and as a
float32 GGUF (llama.cpp's conventions: baked `+1` norms, tiled value heads,
`ssm_a`); after compiling, the main and head graphs must agree on onnxruntime and in
onnxruntime-genai.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.fixtures.fitted_head import PROMPTS, simulate_speculative
from tests.fixtures.gguf_writer import write_gguf

from . import decoding
from .conftest import STEPS, compile_spec, files_of, write_spec


_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}


def _prefill_inputs(session: ort.InferenceSession, prompt: list[int], hidden_size: int) -> dict[str, np.ndarray]:
    """A first call of either graph: the prompt, empty caches and states, and (for the head) a seed hidden state."""
    ids = np.asarray([prompt], dtype=np.int64)
    s = ids.shape[1]
    dims = {"batch_size": 1, "sequence_length": s, "total_sequence_length": s, "past_sequence_length": 0}
    feeds = {
        "input_ids": ids,
        "attention_mask": np.ones_like(ids),
        "position_ids": np.broadcast_to(np.arange(s, dtype=np.int64), (3, 1, s)).copy(),
        "hidden_states": np.random.default_rng(0).standard_normal((1, s, hidden_size)).astype(np.float32),
    }
    out = {}
    for i in session.get_inputs():
        if i.name in feeds:
            out[i.name] = feeds[i.name].astype(_NUMPY[i.type])
        else:  # a cache or recurrent state, zero (or empty) at the start
            out[i.name] = np.zeros([dims[d] if isinstance(d, str) else d for d in i.shape], _NUMPY[i.type])
    return out


@pytest.mark.parametrize("graph", ["model.onnx", "mtp/mtp.onnx"])
def test_graphs_agree_on_every_output(hf_package, gguf_package, arch, graph):
    sessions = [
        ort.InferenceSession(str(p / graph), providers=["CPUExecutionProvider"]) for p in (hf_package, gguf_package)
    ]
    names = [o.name for o in sessions[0].get_outputs()]
    assert names == [o.name for o in sessions[1].get_outputs()]
    for prompt in PROMPTS:
        feeds = _prefill_inputs(sessions[0], list(prompt), arch.hidden_size)
        from_hf, from_gguf = (dict(zip(names, s.run(names, feeds))) for s in sessions)
        for name in names:
            np.testing.assert_allclose(
                from_gguf[name].astype(np.float32), from_hf[name].astype(np.float32), rtol=0, atol=1e-5, err_msg=name
            )


def test_greedy_and_speculative_decoding_agree_across_sources(
    hf_package, gguf_package, reference, head_reference, reference_greedy
):
    hf_model, gguf_model = decoding.load(hf_package), decoding.load(gguf_package)
    gguf_head = decoding.load(gguf_package / "mtp")
    for prompt in PROMPTS:
        tokens = decoding.greedy(gguf_model, list(prompt), STEPS)
        assert tokens == decoding.greedy(hf_model, list(prompt), STEPS) == reference_greedy[prompt]
        for max_draft in (1, 4):
            run = decoding.speculative(gguf_model, gguf_head, list(prompt), STEPS, max_draft)
            assert run.tokens == tokens
            assert run.accepted > 0 and run.rejected > 0, run
            expected = simulate_speculative(reference, head_reference, list(prompt), STEPS, max_draft)
            assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)


def test_headless_gguf_with_head_auto_equals_head_off_byte_for_byte(workdir, arch):
    write_gguf(workdir / "no-nextn.gguf", arch, seed=0, with_mtp=False)
    packages = []
    for head in ("auto", "off"):
        spec = write_spec(
            workdir / f"no-nextn-{head}.yaml", "no-nextn", "{gguf: no-nextn.gguf}", f"mtp: {{head: {head}}}\n"
        )
        packages.append(compile_spec(spec, workdir / f"pkg-no-nextn-{head}"))
    auto, off = (files_of(p) for p in packages)
    assert "model.onnx" in auto and not any(name.startswith("mtp/") for name in auto)
    # provenance.json records each package's own spec, which differ by the `mtp.head` line: only that may differ.
    recorded = [json.loads(files.pop("provenance.json")) for files in (auto, off)]
    assert [r.pop("spec")["file"] for r in recorded] == ["no-nextn-auto.yaml", "no-nextn-off.yaml"]
    assert recorded[0] == recorded[1]
    # The manifests then differ in provenance.json's entry alone.
    listed = [{f["name"]: f for f in json.loads(files.pop("manifest.json"))["files"]} for files in (auto, off)]
    assert listed[0].pop("provenance.json") != listed[1].pop("provenance.json") and listed[0] == listed[1]
    assert auto == off


@pytest.fixture(scope="module")
def float16_package(workdir, fitted_hf):
    spec = write_spec(
        workdir / "hf-f16.yaml", "fitted-f16", f"{{hf: {fitted_hf.name}}}", "precision: {io_dtype: float16}\n"
    )
    return compile_spec(spec, workdir / "pkg-hf-f16")


def test_float16_override_still_emits_the_head(float16_package):
    config = json.loads((float16_package / "genai_config.json").read_text(encoding="utf-8"))["model"]
    assert "mtp" in config and (float16_package / "mtp" / "mtp.onnx").is_file()
    main = onnx.load(float16_package / "model.onnx", load_external_data=False).graph
    head = onnx.load(float16_package / "mtp" / "mtp.onnx", load_external_data=False).graph
    seed_out = next(o for o in main.output if o.name == config["mtp"]["main_hidden_states"])
    seed_in = next(i for i in head.input if i.name == config["mtp"]["inputs"]["hidden_states"])
    assert seed_out.type.tensor_type.elem_type == seed_in.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_float16_package_speculates_to_its_own_greedy_tokens(float16_package):
    main, head = decoding.load(float16_package), decoding.load(float16_package / "mtp")
    for prompt in PROMPTS:
        run = decoding.speculative(main, head, list(prompt), STEPS, 3)
        assert run.tokens == decoding.greedy(main, list(prompt), STEPS)
        assert run.accepted > 0, run
