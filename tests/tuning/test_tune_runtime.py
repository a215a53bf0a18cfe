"""`mtpc tune` on real packages in onnxruntime-genai: its replay of the runtime's rounds, and its recommendation.

No time is asserted. What tune's prediction is held to against a measured og.MtpGenerator
run is its shape: for every draft count the rounds, drafts, acceptances and forwards it
prices are the ones the runtime's own counters report on the same prompts. Which N it
recommends does rest on timings, so the packages leave no doubt: a head that is right all
along the prompts (every N pays, by far) and a random one (no N can).
"""

from __future__ import annotations

import json

import pytest

from mtpc.cli.main import main
from mtpc.schema.validation import errors as schema_errors
from mtpc.tuning.measure import draft_matches, greedy, past_the_end
from mtpc.tuning.runtime import Runtime
import mtpc
from mtpc.tuning.package import open_package
from mtpc.tuning.report import envelope
from mtpc.tuning.schedule import Decoding, schedule, total_schedule

from .conftest import NEW_TOKENS, PROMPTS

FAST = ["--new-tokens", str(NEW_TOKENS), "--threads", "1", "--sweeps", "5"]


def measured_run(runtime: Runtime, prompt: list[int], draft: int) -> tuple[list[int], dict]:
    generator = runtime.generator(runtime.main, len(prompt) + NEW_TOKENS, draft)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence()][len(prompt):], dict(generator.get_stats())


@pytest.fixture(scope="module")
def mixed_runtime(mixed):
    return Runtime(open_package(mixed), threads=1)


@pytest.fixture(scope="module")
def mixed_decodings(mixed_runtime):
    found = []
    for text in PROMPTS:
        prompt = mixed_runtime.encode(text)
        generated = greedy(mixed_runtime, prompt, NEW_TOKENS)
        beyond = past_the_end(mixed_runtime, prompt, generated, 4) if len(generated) < NEW_TOKENS else []
        found.append((prompt, Decoding(len(prompt), NEW_TOKENS, tuple(generated), draft_matches(mixed_runtime, prompt, generated, 4, beyond))))
    return found


COUNTERS = {
    "rounds": lambda s: s.rounds,
    "draft_tokens_proposed": lambda s: s.proposed,
    "draft_tokens_evaluated": lambda s: s.evaluated,
    "draft_tokens_accepted": lambda s: s.accepted,
    "target_forward_passes": lambda s: s.target_forwards,
    "draft_forward_passes": lambda s: s.draft_forwards,
}


@pytest.mark.parametrize("draft", [1, 2, 3, 4])
def test_the_replayed_rounds_are_the_runtimes_own(mixed_runtime, mixed_decodings, draft):
    accepted = rejected = 0
    for prompt, decoding in mixed_decodings:
        tokens, stats = measured_run(mixed_runtime, prompt, draft)
        assert tuple(tokens) == decoding.generated  # lossless: the tokens tune priced are the ones MTP emits
        # The package's state is windowed (auto, W = 5): from 2 drafts on, the runtime crops instead of replaying.
        plan = schedule(decoding, draft, mixed_runtime.package.state_window)
        assert {k: int(stats[k]) for k in COUNTERS} == {k: f(plan) for k, f in COUNTERS.items()}, prompt
        accepted += plan.accepted
        rejected += plan.evaluated - plan.accepted
    assert accepted > 0 and rejected > 0  # the head's drafts meet both, so both paths were compared


def test_partly_accepted_rounds_are_among_those_compared(mixed_decodings):
    # A round that keeps some drafts and refuses the next replays a prefix and refeeds the head with it.
    assert {kind for _, d in mixed_decodings for kind, _, _ in schedule(d, 4, window=5).operations} >= {"crop"}
    widths = {w for _, d in mixed_decodings for kind, w, _ in schedule(d, 4).operations if kind in ("head_forward", "replay")}
    assert widths - {1}, widths  # a refeed wider than the first draft, a replay past the committed token


@pytest.fixture(scope="module")
def sure_report(sure) -> dict:
    # Through the Python API, `mtpc.tune` (the verb's own JSON: test_a_random_head_gets_mtp_turned_off).
    result = mtpc.tune(sure, PROMPTS, prompts_source="prompts.txt", new_tokens=NEW_TOKENS, threads=1, sweeps=5)
    return envelope(result.body)


def test_a_head_that_is_right_gets_drafts_recommended(sure_report):
    assert schema_errors("tune_report", sure_report) == []
    first = sure_report["acceptance"][0]
    assert first["tried"] > 0 and first["accepted"] / first["tried"] > 0.9
    recommended = sure_report["recommendation"]["draft"]
    assert recommended >= 1
    assert sure_report["recommendation"]["spec_line"] == f"targets.onnxruntime_genai.max_draft_tokens: {recommended}"
    assert [p["draft"] for p in sure_report["predictions"]] == [0, 1, 2, 3, 4]


def test_the_recommended_rows_counters_are_what_the_runtime_does(sure, sure_report):
    runtime = Runtime(open_package(sure), threads=1)
    draft = sure_report["recommendation"]["draft"]
    row = sure_report["predictions"][draft]
    totals = dict.fromkeys(("draft_tokens_proposed", "draft_tokens_accepted", "target_forward_passes", "draft_forward_passes", "rounds"), 0)
    for text in PROMPTS:
        _, stats = measured_run(runtime, runtime.encode(text), draft)
        for key in totals:
            totals[key] += int(stats[key])
    assert totals == {"draft_tokens_proposed": row["proposed"], "draft_tokens_accepted": row["accepted"],
                      "target_forward_passes": row["target_forwards"], "draft_forward_passes": row["draft_forwards"],
                      "rounds": row["rounds"]}


def test_a_random_head_gets_mtp_turned_off(random_head, prompts_file, capsys):
    assert main(["tune", str(random_head), "--prompts", str(prompts_file), *FAST, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["acceptance"][0]["accepted"] == 0
    assert report["recommendation"]["draft"] == 0
    assert report["recommendation"]["spec_line"] == "mtp: {head: off}"


def test_text_output_shows_the_table_and_the_spec_line_to_change(sure, prompts_file, tune_workdir, capsys):
    # The spec as a user writes it who left max_draft_tokens to the default (the fixture's spec sets 4 so
    # that its window holds four drafts; --spec only says where the recommended line goes).
    spec = tune_workdir / "sure-unwritten.yaml"
    spec.write_text((tune_workdir / "sure.yaml").read_text("utf-8").replace("max_draft_tokens: 4, ", ""), encoding="utf-8")
    # Up to 3 drafts: whichever N wins, it is not the 4 the package drafts now, so there is a line to change.
    assert main(["tune", str(sure), "--prompts", str(prompts_file), *FAST, "--max-draft", "3", "--spec", str(spec)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert any(line.startswith("  0 (off)") or line.startswith("* 0 (off)") for line in lines)
    assert sum(line[2:3].isdigit() for line in lines if line[:1] in " *" and "x " in line) == 4  # rows N = 0..3
    (spec_line,) = [line for line in lines if line.startswith("  spec: ")]
    assert "targets.onnxruntime_genai.max_draft_tokens:" in spec_line
    # The spec does not write the field: the position is that of the section it belongs in.
    assert f"# {spec}:" in spec_line and "not written there yet" in spec_line
    assert "  (the package drafts 4 now)" in lines
    assert "mtpc: timing decoding steps" in captured.err  # progress on stderr


def test_totals_of_a_report_are_the_sum_over_its_prompts(mixed_decodings):
    total = total_schedule([d for _, d in mixed_decodings], 2)
    assert total.tokens == sum(len(d.generated) for _, d in mixed_decodings)
