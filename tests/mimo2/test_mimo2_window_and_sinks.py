"""The tiny MiMo-V2-Flash's window and sinks decide its tokens: onnxruntime-genai decodes as transformers'
`MiMoV2FlashForCausalLM` with them (tests/conformance), and packages of the same weights compiled without either
part from transformers' greedy tokens within 20 steps:

- the window removed (`sliding_window_size` widened past the context);
- the sinks switched off (`add_swa_attention_sink_bias: false`, the sink tensors left out).

The window's convention (W = `sliding_window_size` + 1, the authors' SGLang, transformers' config) against vLLM's
(W = `sliding_window_size`) is told apart in test_mimo2_heads.py, where one token of window shows in the numbers."""

from __future__ import annotations

import pytest

from tests.clients import hf_transformers
from tests.fixtures.mimo2_checkpoints import PROMPTS, fitted_mimo_tensors, load_transformers_mimo, mimo_config
from tests.runtime import decoding
from tests.runtime.conftest import STEPS

from .conftest import compile_mimo


@pytest.fixture(scope="module")
def transformers_greedy(arch):
    model = load_transformers_mimo(arch, fitted_mimo_tensors(arch))
    return {prompt: hf_transformers.greedy(model, list(prompt), STEPS) for prompt in PROMPTS}


def _variant(mimo_dir, arch, name: str, tensors: dict, **config):
    from tests.fixtures.mimo2_checkpoints import write_mimo_checkpoint

    folder = write_mimo_checkpoint(mimo_dir / name, arch, tensors=tensors, config=mimo_config(arch, **config))
    return decoding.load(compile_mimo(mimo_dir, name, source=name))


def test_a_package_without_the_window_parts_from_transformers(mimo_dir, arch, transformers_greedy, models):
    wide = _variant(mimo_dir, arch, "no-window", fitted_mimo_tensors(arch), sliding_window=511, sliding_window_size=511)
    prompt = PROMPTS[0]
    assert decoding.greedy(models[0], list(prompt), STEPS) == transformers_greedy[prompt]
    assert decoding.greedy(wide, list(prompt), STEPS) != transformers_greedy[prompt]


def test_a_package_without_the_sinks_parts_from_transformers(mimo_dir, arch, transformers_greedy):
    tensors = {n: v for n, v in fitted_mimo_tensors(arch).items() if not n.endswith("attention_sink_bias")}
    sinkless = _variant(mimo_dir, arch, "no-sinks", tensors, add_swa_attention_sink_bias=False)
    differs = [decoding.greedy(sinkless, list(p), STEPS) != transformers_greedy[p] for p in PROMPTS]
    assert any(differs), differs
