"""mtpc.tuning.decode: decoding a package timed round by round, and acceptance per draft position."""

from __future__ import annotations

import pytest

from mtpc.tuning.decode import Round, decode, round_acceptance, tokens_per_round
from mtpc.tuning.package import open_package
from mtpc.tuning.runtime import Runtime
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from tests.fixtures.arch import tiny_arch
from tests.fixtures.fitted_head import PROMPTS, fitted_store, simulate_speculative


def test_acceptance_per_position_counts_only_the_rounds_that_judged_that_draft():
    rounds = [Round(4, 0, 0), Round(4, 4, 0), Round(4, 1, 0), Round(4, 2, 0), Round(2, 2, 0)]
    # Position 1 judged by all five (4 kept it); 2 by the four that kept 1 (3 kept: 4, 2 and the short round's 2);
    # 3 by the two 4-draft rounds that kept 2 (the 2-draft round made no third); 4 by the one that kept 3.
    assert round_acceptance(rounds, 4) == (4 / 5, 3 / 4, 1 / 2, 1.0)
    assert round_acceptance([Round(1, 0, 0)], 2) == (0.0, None)
    assert tokens_per_round(rounds) == (1 + 5 + 2 + 3 + 3) / 5


@pytest.mark.parametrize("max_draft", [1, 3])
def test_rounds_add_up_to_the_runtimes_counters_and_the_reference(fitted_package, max_draft):
    arch = tiny_arch()
    runtime = Runtime(open_package(fitted_package, needs_tokenizer=False), threads=1)
    prompt = list(PROMPTS[0])
    plain = decode(runtime, prompt, 20)
    run = decode(runtime, prompt, 20, max_draft)
    assert run.tokens == plain.tokens and len(run.tokens) == 20
    assert run.wall_s > 0 and run.cpu_s > 0 and all(r.seconds > 0 for r in run.rounds)
    expected = simulate_speculative(Qwen35Reference(arch, fitted_store(arch)),
                                    MtpHeadReference(arch, fitted_store(arch)), prompt, 20, max_draft)
    assert (run.drafted, run.accepted) == (expected.drafted, expected.accepted)
    assert 0 < run.accepted and run.rejected > 0
    # The runtime counts a verify per round and a replay per rejection (not the prompt's forward), but for
    # the rejections it crops: on this windowed package (W = 5), every one at 2 drafts or more.
    window = open_package(fitted_package, needs_tokenizer=False).state_window
    assert window == 5
    assert run.main_forwards == len(run.rounds) + (0 if max_draft > 1 else run.rejected)
    assert all(0.0 <= share <= 1.0 for share in round_acceptance(run.rounds, max_draft) if share is not None)
