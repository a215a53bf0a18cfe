"""Greedy and MTP speculative decoding through onnxruntime-genai's Python API, batch 1; a head graph alone on
onnxruntime (`HeadGraph`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime_genai as og


@dataclass(frozen=True)
class Speculation:
    tokens: list[int]
    accepted: int  # drafts the main model agreed with
    proposed: int  # drafts the head made
    evaluated: int  # drafts the main model checked (those past max_length are not)
    target_forwards: int = 0  # main-model forwards after the prompt's: verifies, and replays after rejections

    @property
    def rejected(self) -> int:
        return self.evaluated - self.accepted


# The state window of each main model `load` opened (og.Model does not say), by id.
_WINDOWS: dict[int, int] = {}


def load(package: Path) -> og.Model:
    model = og.Model(str(package))
    _WINDOWS[id(model)] = state_window(package)
    return model


def state_window(package: Path) -> int:
    """W of a package's windowed conv / recurrent state (0: unwindowed), as `mtpc tune` reads it."""
    import json

    from mtpc.tuning.package import state_window as read_window

    return read_window(Path(package), json.loads((Path(package) / "genai_config.json").read_text()))


def greedy(model: og.Model, prompt: list[int], steps: int) -> list[int]:
    """The `steps` tokens og.Generator picks after `prompt` with sampling off."""
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + steps)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][len(prompt) :]


def speculative(main: og.Model, head: og.Model, prompt: list[int], steps: int, max_draft: int) -> Speculation:
    """og.MtpGenerator's tokens after `prompt`, and its draft counters."""
    params = og.GeneratorParams(main)
    params.set_search_options(do_sample=False, max_length=len(prompt) + steps)
    params.set_speculative_options(max_draft_tokens=max_draft)
    generator = og.MtpGenerator(main, head, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    stats = generator.get_stats()
    tokens = [int(t) for t in generator.get_sequence()][len(prompt) :]
    return Speculation(
        tokens,
        accepted=int(stats["draft_tokens_accepted"]),
        proposed=int(stats["draft_tokens_proposed"]),
        evaluated=int(stats["draft_tokens_evaluated"]),
        target_forwards=int(stats["target_forward_passes"]),
    )


def check_speculative(models, greedy: list[int], reference, head_reference, prompt, max_draft: int,
                      expected=None) -> None:
    """og.MtpGenerator gives `greedy`, and drafts and accepts what the numpy rendition of the head does
    (tests/fixtures/fitted_head.simulate_speculative; `expected`, when the caller has it already), with drafts
    both accepted and rejected (so the head's drafts are really used)."""
    from tests.fixtures.fitted_head import simulate_speculative
    from tests.runtime.conftest import STEPS

    main_model, head = models
    run = speculative(main_model, head, list(prompt), STEPS, max_draft)
    assert run.tokens == greedy
    if expected is None:
        expected = simulate_speculative(reference, head_reference, list(prompt), STEPS, max_draft)
    assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
    assert run.accepted > 0 and run.rejected > 0, run
    # A windowed package crops a partly accepted verify (greedy, 2 or more drafts): no replay forward.
    crop = _WINDOWS[id(main_model)] > 1 and max_draft >= 2
    assert run.target_forwards == expected.main_forwards(crop), (run, expected, crop)


class HeadGraph:
    """mtp/mtp.onnx on onnxruntime alone, fed a prompt at once as onnxruntime-genai feeds it (empty caches)."""

    def __init__(self, path):
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]

    def run(self, ids, seed) -> dict:
        feeds = {"input_ids": np.asarray([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
                 "position_ids": np.arange(len(ids), dtype=np.int64)[None], "hidden_states": seed}
        for i in self.session.get_inputs():
            if i.name.startswith("past_key_values."):
                feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
        return dict(zip(self.names, self.session.run(self.names, feeds)))

