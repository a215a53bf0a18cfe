"""onnxruntime-genai takes the crop path on a windowed package: a rejected draft costs no replay forward.

`target_forward_passes` counts the main model's forwards after the prompt: one verify per round,
plus a replay of the accepted prefix after each partly accepted round when the runtime cannot crop.
The numpy rendition of greedy speculative decoding (`simulate_speculative`) counts both. On the
windowed package (`state_window: auto`, W = 5) greedy decoding with 2-4 drafts must need the verifies
alone, with drafts both accepted and rejected and the greedy tokens out; the same spec with
`state_window: off` must replay, which shows the counter tells the two paths apart. With one draft
the runtime always snapshots and replays (`GenerateStepSingle`), windowed or not.
"""

from __future__ import annotations

import pytest

from tests.fixtures.fitted_head import PROMPTS, simulate_speculative

from . import decoding
from .conftest import STEPS, compile_spec, write_spec


@pytest.fixture(scope="module")
def unwindowed_package(workdir, fitted_hf):
    spec = write_spec(workdir / "hf-unwindowed.yaml", "fitted", f"{{hf: {fitted_hf.name}}}")
    spec.write_text(spec.read_text().replace("attention: dense}", "attention: dense, state_window: off}"))
    return compile_spec(spec, workdir / "pkg-hf-unwindowed")


@pytest.fixture(scope="module")
def packages(hf_package, gguf_package, unwindowed_package):
    return {name: (decoding.load(p), decoding.load(p / "mtp"), decoding.state_window(p))
            for name, p in (("hf", hf_package), ("gguf", gguf_package), ("hf-off", unwindowed_package))}


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("name", ["hf", "gguf", "hf-off"])
def test_main_forwards_are_the_verifies_alone_when_the_state_is_windowed(
        packages, reference, head_reference, reference_greedy, name, prompt, max_draft):
    main, head, window = packages[name]
    assert window == (0 if name == "hf-off" else 5)
    run = decoding.speculative(main, head, list(prompt), STEPS, max_draft)
    expected = simulate_speculative(reference, head_reference, list(prompt), STEPS, max_draft)
    assert run.tokens == reference_greedy[prompt]
    assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
    assert expected.partial > 0 and run.accepted > 0  # rejections happen, so a replay would show
    crop = window > 1 and max_draft >= 2
    assert run.target_forwards == expected.main_forwards(crop) == expected.rounds + (0 if crop else expected.partial)
