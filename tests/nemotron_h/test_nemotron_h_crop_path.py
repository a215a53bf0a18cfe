"""onnxruntime-genai takes the crop path on a Nemotron-H package: its Mamba2 states are windowed as Qwen3.5's Gated
DeltaNet states are (tests/runtime/test_crop_path.py), so a partly accepted verify costs no replay forward.

`target_forward_passes` counts the main model's forwards after the prompt; the numpy rendition of greedy
speculative decoding (`simulate_speculative`) counts the verifies and the rounds that rejected a draft. With the
window (`state_window: auto`, W = 5) greedy decoding at 2-4 drafts needs the verifies alone, with drafts accepted
and rejected and the greedy tokens out; with `state_window: off` the runtime replays, which shows the counter tells
the two apart. One draft always snapshots and replays. The window's slots are held to the reference's per-token
states in tests/graphs/test_state_window.py (its `mamba2` case). `mtpc tune` prices the same rounds: its
schedule, built from what it measures of the package, has the runtime's own counters, crops included.
"""

from __future__ import annotations

import pytest

from mtpc.reference.forward import DecoderReference, MtpHeadReference
from tests.fixtures.fitted_head import simulate_speculative
from tests.fixtures.nemotron_h_checkpoints import PROMPTS, fitted_nemotron_store, tiny_nemotron_arch, write_nemotron_checkpoint
from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, write_spec


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    arch = tiny_nemotron_arch()
    work = tmp_path_factory.mktemp("nemotron-crop")
    folder = write_nemotron_checkpoint(work / "release", arch)
    out = {}
    for window in ("auto", "off"):
        spec = write_spec(work / f"{window}.yaml", "nemotron", f"{{hf: {folder.name}}}")
        spec.write_text(spec.read_text().replace("attention: dense}", f"attention: dense, state_window: {window}}}"))
        package = compile_spec(spec, work / f"pkg-{window}")
        out[window] = (decoding.load(package), decoding.load(package / "mtp"), decoding.state_window(package), package)
    return out


@pytest.fixture(scope="module")
def references():
    arch = tiny_nemotron_arch()
    store = fitted_nemotron_store(arch)
    return DecoderReference(arch, store), MtpHeadReference(arch, store)


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("window", ["auto", "off"])
def test_main_forwards_are_the_verifies_alone_when_the_state_is_windowed(packages, references, window, prompt,
                                                                           max_draft):
    main, head, w, _ = packages[window]
    assert w == (5 if window == "auto" else 0)
    run = decoding.speculative(main, head, list(prompt), STEPS, max_draft)
    expected = simulate_speculative(*references, list(prompt), STEPS, max_draft)
    assert run.tokens == references[0].greedy(list(prompt), STEPS)
    assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
    assert expected.partial > 0 and run.accepted > 0
    crop = w > 1 and max_draft >= 2
    assert run.target_forwards == expected.main_forwards(crop) == expected.rounds + (0 if crop else expected.partial)


@pytest.mark.parametrize("max_draft", [1, 3])
def test_tune_prices_the_rounds_the_runtime_runs(packages, max_draft):
    from mtpc.tuning.measure import draft_matches, greedy
    from mtpc.tuning.package import open_package
    from mtpc.tuning.runtime import Runtime
    from mtpc.tuning.schedule import Decoding, schedule

    main, head, _, package = packages["auto"]
    runtime = Runtime(open_package(package, needs_tokenizer=False), threads=1)
    assert runtime.package.state_window == 5
    crops = 0
    for prompt in map(list, PROMPTS):
        generated = greedy(runtime, prompt, STEPS)
        assert len(generated) == STEPS  # no end token: nothing past the end to draft
        plan = schedule(Decoding(len(prompt), STEPS, tuple(generated), draft_matches(runtime, prompt, generated, 4)),
                        max_draft, runtime.package.state_window)
        run = decoding.speculative(main, head, prompt, STEPS, max_draft)
        assert (plan.proposed, plan.evaluated, plan.accepted, plan.target_forwards) == (
            run.proposed, run.evaluated, run.accepted, run.target_forwards)
        crops += sum(kind == "crop" for kind, _, _ in plan.operations)
    assert (crops > 0) == (max_draft > 1)  # one draft snapshots and replays; more crop a partly accepted verify
