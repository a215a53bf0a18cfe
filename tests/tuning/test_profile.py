"""mtpc.tuning.profile: a speculative round split into head forwards, verify, replays and the runtime's work."""

from __future__ import annotations

import pytest

from mtpc.tuning.profile import profile_plain, profile_speculative
from tests.fixtures.fitted_head import PROMPTS


@pytest.mark.parametrize("drafts", [1, 3])
def test_every_part_of_a_round_is_measured_and_they_add_up(fitted_package, drafts):
    costs = profile_speculative(fitted_package, list(PROMPTS[0]), 20, drafts, {"intra_op_num_threads": 1})
    assert costs.tokens == 20 and 0 < costs.rounds < 20
    assert costs.head_forwards >= costs.rounds
    if drafts == 1:
        # The fitted head's drafts are both kept and refused: some rounds replay, not all.
        assert 0 < costs.replays < costs.rounds
        assert min(costs.head_ms, costs.verify_ms, costs.replay_ms) > 0 and costs.runtime_ms >= 0
    else:
        # The package's state is windowed (auto): at 3 drafts the runtime crops the refusals, no round replays.
        assert costs.replays == 0 and costs.replay_ms == 0
        assert min(costs.head_ms, costs.verify_ms) > 0 and costs.runtime_ms >= 0
    assert costs.ms_per_token == pytest.approx(costs.round_ms * costs.rounds / costs.tokens)


def test_the_plain_step_includes_its_forward(fitted_package):
    per_token, forward = profile_plain(fitted_package, list(PROMPTS[0]), 20, {"intra_op_num_threads": 1})
    assert 0 < forward < per_token * 2  # one forward per token, plus a little of the runtime's own work
