"""The replay of og.MtpGenerator's rounds (`mtpc.tuning.schedule`) and the prediction on top of it, on hand-worked cases.

Each expected schedule below was worked out by hand from onnxruntime-genai's
src/mtp_generator.cpp (GenerateStepSingle / GenerateStepMulti), not by running the code:
which forwards a round issues, how wide, and what its counters add. The runtime's own
counters are compared with the replay in tests/tuning/test_tune_runtime.py.
"""

from __future__ import annotations

import pytest

from mtpc.tuning.predict import MARGIN, predict, recommend
from mtpc.tuning.schedule import (
    CROP, HEAD_CHAIN, HEAD_FORWARD, HEAD_REWIND, PLAIN_STEP, REPLAY, RESTORE, SNAPSHOT, VERIFY,
    Decoding, StepCosts, acceptance_by_position, schedule, seconds, total_schedule,
)


def decoding(matches, new_tokens=None) -> Decoding:
    tokens = len(matches)
    return Decoding(prompt_tokens=3, new_tokens=new_tokens or tokens, generated=tuple(range(10, 10 + tokens)),
                    matches=tuple(matches))


def ops(plan) -> dict:
    return {(kind, width): n for kind, width, n in plan.operations}


def test_plain_decoding_is_one_step_per_token_after_the_first():
    plan = schedule(decoding([0] * 5), 0)
    assert ops(plan) == {(PLAIN_STEP, 1): 4}
    assert (plan.tokens, plan.rounds) == (5, 0)


def test_one_draft_always_rejected_restores_and_reruns_the_token_every_round():
    # Rounds commit tokens 0..3 (token 4 ends decoding); each drafts afresh, verifies 2 wide, replays 1 wide.
    plan = schedule(decoding([0] * 5), 1)
    assert ops(plan) == {(HEAD_FORWARD, 1): 4, (SNAPSHOT, 0): 4, (VERIFY, 2): 4, (RESTORE, 0): 4, (REPLAY, 1): 4}
    assert (plan.rounds, plan.proposed, plan.evaluated, plan.accepted) == (4, 4, 4, 0)
    assert (plan.target_forwards, plan.draft_forwards) == (8, 4)


def test_one_draft_always_accepted_drafts_the_next_one_with_the_accepted_one():
    # Round at 0: fresh draft, verify, accept, DraftTwo (2 wide); round at 2: reuses that draft; round at 4 ends.
    plan = schedule(decoding([1, 1, 1, 1, 0]), 1)
    assert ops(plan) == {(HEAD_FORWARD, 1): 1, (HEAD_FORWARD, 2): 2, (SNAPSHOT, 0): 2, (VERIFY, 2): 2}
    assert (plan.rounds, plan.proposed, plan.evaluated, plan.accepted) == (2, 2, 2, 2)


def test_an_accepted_draft_that_reaches_max_length_ends_the_round_at_once():
    # Round at 0 accepts token 1; round at 2 accepts token 3, the last: no DraftTwo, no replay after it.
    plan = schedule(decoding([1, 0, 1, 0]), 1)
    assert ops(plan) == {(HEAD_FORWARD, 1): 1, (HEAD_FORWARD, 2): 1, (SNAPSHOT, 0): 2, (VERIFY, 2): 2}


def test_chained_drafts_feed_the_accepted_ones_back_with_the_next_first_draft():
    # N=3. Round at 0: a first head forward and 2 chained ones, verify 4 wide, 1 accepted, replay [t, d0]
    # (2 wide). Round at 2: head rewound, first forward 1 + 1 wide, 2 chained, verify 4 wide, all 3
    # accepted: the last reaches max_length, so the round ends there.
    plan = schedule(decoding([1, 0, 3, 2, 1, 0]), 3)
    assert ops(plan) == {
        (HEAD_FORWARD, 1): 1, (HEAD_FORWARD, 2): 1, (HEAD_CHAIN, 1): 4, (HEAD_REWIND, 0): 1,
        (SNAPSHOT, 0): 2, (VERIFY, 4): 2, (RESTORE, 0): 1, (REPLAY, 2): 1,
    }
    assert (plan.rounds, plan.proposed, plan.evaluated, plan.accepted) == (2, 6, 5, 4)


def test_a_windowed_state_crops_instead_of_snapshotting_and_replaying_at_two_drafts_or_more():
    # The N=3 case above on a package with a state window (GenerateStepMulti's direct_commit): no snapshot
    # before either verify, and the round at 0 that kept 1 of 3 drafts crops where it replayed.
    plan = schedule(decoding([1, 0, 3, 2, 1, 0]), 3, window=4)
    assert ops(plan) == {
        (HEAD_FORWARD, 1): 1, (HEAD_FORWARD, 2): 1, (HEAD_CHAIN, 1): 4, (HEAD_REWIND, 0): 1,
        (VERIFY, 4): 2, (CROP, 0): 1,
    }
    assert (plan.rounds, plan.proposed, plan.evaluated, plan.accepted) == (2, 6, 5, 4)
    assert plan.target_forwards == 2  # the verifies alone
    # One draft (GenerateStepSingle) snapshots and replays whatever the window.
    assert schedule(decoding([0] * 5), 1, window=4) == schedule(decoding([0] * 5), 1)


def test_a_window_caps_the_drafts_at_one_less_than_its_size():
    # W = 3: the runtime drafts at most 2 tokens, so asking for 4 runs as 2 (the schedule keeps the count asked).
    capped, two = schedule(decoding([4, 3, 2, 1, 0, 0]), 4, window=3), schedule(decoding([4, 3, 2, 1, 0, 0]), 2, window=3)
    assert capped.draft == 4 and (capped.rounds, capped.proposed, capped.operations) == (two.rounds, two.proposed,
                                                                                          two.operations)


def test_rounds_near_max_length_draft_only_what_fits():
    # N=4 with 4 new tokens: the rounds at 0, 1, 2 have room for 3, 2 and 1 drafts.
    plan = schedule(decoding([0, 0, 0, 0]), 4)
    assert (plan.rounds, plan.proposed, plan.evaluated) == (3, 6, 3)
    assert ops(plan)[(VERIFY, 4)] == ops(plan)[(VERIFY, 3)] == ops(plan)[(VERIFY, 2)] == 1
    assert ops(plan)[(REPLAY, 1)] == 3 and ops(plan)[(HEAD_REWIND, 0)] == 2


def test_an_end_token_before_max_length_ends_decoding_where_it_is():
    # Greedy stopped at an end token after 3 of 8 tokens: rounds at 0 and 1 only, drafting as max_length allows.
    plan = schedule(decoding([0, 0, 0], new_tokens=8), 4)
    assert (plan.rounds, plan.proposed) == (2, 8)


def test_schedules_of_several_prompts_add_up():
    a, b = decoding([1, 0, 3, 2, 1, 0]), decoding([0] * 5)
    total = total_schedule([a, b], 3)
    assert total.rounds == schedule(a, 3).rounds + schedule(b, 3).rounds
    assert total.target_forwards == schedule(a, 3).target_forwards + schedule(b, 3).target_forwards


def test_acceptance_by_position_counts_a_draft_only_where_the_ones_before_it_were_right():
    # Tokens 0..4; matches 2, 0, 1, 0, -: position 1 tried at tokens 0..3 (4), kept at 0 and 2;
    # position 2 tried where position 1 was kept and a second token follows: tokens 0 and 2, kept at 0.
    assert acceptance_by_position([decoding([2, 0, 1, 0, 0])], 3) == ((4, 2), (2, 1), (1, 0))


def costs(main=1.0, head=0.1, plain=1.0) -> StepCosts:
    widths = tuple(main * (1 + 0.1 * w) for w in range(6))
    return StepCosts(plain, widths, tuple(0.9 * c for c in widths), tuple([head] * 6), 0.8 * head, 0.0, 0.01, 0.0)


def test_prediction_prices_every_operation_of_the_schedule():
    d = decoding([1, 0, 3, 2, 1, 0])
    c = costs()
    plan = schedule(d, 3)
    by_hand = 2 * 0.1 + 4 * 0.08 + 2 * c.verify[3] + 1 * 0.01 + 1 * c.replay[1]
    assert seconds(plan, c) == pytest.approx(by_hand)
    predictions = predict([d], c, 3)
    assert predictions[3].tokens_per_second == pytest.approx(6 / by_hand)
    assert predictions[0].tokens_per_second == pytest.approx(6 / 5)


def test_a_head_that_is_never_right_is_never_recommended():
    predictions = predict([decoding([0] * 40)], costs(head=0.001), 4)
    assert all(p.speedup < 1 for p in predictions[1:])
    assert recommend(predictions) == 0


def test_a_head_that_is_always_right_is_recommended_at_its_fastest_count():
    matches = [min(4, 39 - i) for i in range(40)]
    predictions = predict([decoding(matches)], costs(), 4)
    best = max(predictions, key=lambda p: p.tokens_per_second)
    assert best.draft > 0 and recommend(predictions) == best.draft


def test_a_gain_under_the_margin_keeps_mtp_off():
    matches = [1] * 40
    slow_head = (1 + MARGIN / 2) ** -1  # tuned so N=1 is just above plain decoding, but under the margin
    predictions = predict([decoding(matches)], StepCosts(1.0, (1.0, 1.0), (1.0, 1.0), (0.0, slow_head), 0.0, 0.0, 0.0, 0.0), 1)
    assert 1 < predictions[1].speedup < 1 + MARGIN
    assert recommend(predictions) == 0
