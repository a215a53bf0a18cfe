"""og.MtpGenerator on CPU with the compiled head: exactly the greedy tokens, with drafts both kept and refused.

The fitted head makes some drafts right and some wrong (tests/fixtures/fitted_head.py),
so the counters show that the runtime really verifies drafts from our head: a
head it ignored or misread would give no accepted drafts, a verifier that
accepted everything would emit tokens other than the greedy ones.
"""

from __future__ import annotations

import pytest

from tests.fixtures.fitted_head import PROMPTS, simulate_speculative

from . import decoding
from .conftest import STEPS


@pytest.fixture(scope="module")
def models(hf_package):
    return decoding.load(hf_package), decoding.load(hf_package / "mtp")


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_tokens_equal_greedy_with_accepted_and_rejected_drafts(
    models, reference, head_reference, reference_greedy, prompt, max_draft
):
    main, head = models
    run = decoding.speculative(main, head, list(prompt), STEPS, max_draft)
    assert run.tokens == reference_greedy[prompt]
    assert run.accepted > 0 and run.rejected > 0, run
    # The numpy head drafts the same tokens: as many proposed, as many accepted.
    expected = simulate_speculative(reference, head_reference, list(prompt), STEPS, max_draft)
    assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)

