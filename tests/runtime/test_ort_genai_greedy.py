"""onnxruntime-genai (the installed release) on CPU loads compiled packages as emitted and decodes like the numpy reference."""

from __future__ import annotations

import json

import onnx
import pytest

from mtpc.ir import LayerKind
from mtpc.reference.forward import Qwen35Reference
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.fitted_head import PROMPTS

from . import decoding
from .conftest import STEPS, compile_spec, write_spec


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_tokens_equal_the_reference(hf_package, reference_greedy, prompt):
    model = decoding.load(hf_package)
    assert decoding.greedy(model, list(prompt), STEPS) == reference_greedy[prompt]


HEADLESS = tiny_arch(mtp_num_layers=0)


@pytest.fixture(scope="module")
def headless(workdir):
    """An HF checkpoint without `mtp.*` tensors, compiled with the default `head: auto`."""
    write_hf_checkpoint(workdir / "headless-hf", HEADLESS, seed=0, with_mtp=False)
    spec = write_spec(workdir / "headless.yaml", "headless", "{hf: headless-hf}")
    return compile_spec(spec, workdir / "pkg-headless")


def test_headless_source_gives_a_package_without_any_trace_of_mtp(headless):
    files = sorted(p.relative_to(headless).as_posix() for p in headless.rglob("*") if p.is_file())
    assert not (headless / "mtp").exists()
    assert not any("mtp" in f for f in files), files
    text = (headless / "genai_config.json").read_text(encoding="utf-8")
    assert "mtp" not in text and "speculative" not in text
    assert "hidden_states" not in json.loads(text)["model"]["decoder"]["outputs"]


def test_headless_main_graph_outputs_only_logits_and_present_states(headless):
    graph = onnx.load(headless / "model.onnx", load_external_data=False).graph
    expected = {"logits"}
    for i, kind in enumerate(HEADLESS.layer_kinds):
        states = ("key", "value") if kind is LayerKind.FULL_ATTENTION else ("conv", "recurrent")
        expected |= {f"present.{i}.{state}" for state in states}
    assert {o.name for o in graph.output} == expected
    logits = next(o for o in graph.output if o.name == "logits")
    # float16 logits are a workaround for og.MtpGenerator on CPU; a text-only package has no reason for it.
    assert logits.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_headless_package_decodes_like_the_reference(headless):
    reference = Qwen35Reference(HEADLESS, seeded_store(HEADLESS, 0, with_mtp=False))
    model = decoding.load(headless)
    for prompt in PROMPTS:
        assert decoding.greedy(model, list(prompt), STEPS) == reference.greedy(list(prompt), STEPS)
