"""The fitted head fixture does what the runtime tests rely on, checked in numpy alone."""

from __future__ import annotations

import pytest

from mtpc.reference.forward import MtpHeadReference
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.fitted_head import HORIZON, PROMPTS, simulate_speculative

from .conftest import STEPS


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_decoding_keeps_greedy_tokens_with_accepted_and_rejected_drafts(
    reference, head_reference, reference_greedy, prompt, max_draft
):
    run = simulate_speculative(reference, head_reference, list(prompt), STEPS, max_draft)
    assert run.tokens == reference_greedy[prompt]
    assert 0 < run.accepted < run.drafted
    assert run.accepted >= run.drafted / 2  # far from what a broken head would get (test below)


def test_greedy_continuations_never_reach_special_tokens(reference):
    # eos would end the runtime's decoding early; pad and bos are kept out too.
    for prompt in PROMPTS:
        assert min(reference.greedy(list(prompt), HORIZON)) > 2


def test_a_seeded_random_head_is_what_the_fit_replaces(arch, reference, reference_greedy):
    # The contrast that makes the fixture necessary: random drafts are (almost) never accepted.
    random_head = MtpHeadReference(arch, seeded_store(arch, 0))
    runs = [simulate_speculative(reference, random_head, list(p), STEPS, 2) for p in PROMPTS]
    assert [r.tokens for r in runs] == [reference_greedy[p] for p in PROMPTS]
    assert sum(r.accepted for r in runs) <= 1
