"""The 8-token window decides the tiny Step-3.5's tokens: onnxruntime-genai decodes as transformers with it
(tests/conformance), and a package of the same weights compiled without it (the config's sliding_window widened
past the context) parts from transformers' greedy tokens within 20 steps. (A window one token wider is another
attention too: tests/graphs/test_attention.py, against transformers' own.)"""

from __future__ import annotations

from tests.clients import hf_transformers
from tests.fixtures.step35_checkpoints import (PROMPTS, fitted_step_tensors, load_transformers_step, step_config,
                                              write_step_checkpoint)
from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, write_spec


def test_a_package_without_the_window_parts_from_transformers(step_dir, arch):
    window = 512
    folder = write_step_checkpoint(step_dir / f"window-{window}", arch, config=step_config(arch, sliding_window=window))
    package = compile_spec(write_spec(step_dir / f"window-{window}.yaml", "w", f"{{hf: {folder.name}}}"),
                           step_dir / f"pkg-window-{window}")
    model = decoding.load(package)
    transformers = load_transformers_step(arch, fitted_step_tensors(arch))  # its own config: the window of 8
    prompt = list(PROMPTS[0])
    assert decoding.greedy(model, prompt, STEPS) != hf_transformers.greedy(transformers, prompt, STEPS)
