"""Expected tokens per second for every draft count, and which one to use.

For each N the prompts' rounds are replayed as the runtime would run them
(`schedule.total_schedule`) and priced with the measured step costs; tokens per second is
the generated tokens over those seconds (decoding only: the prompt's own forward is the
same for every N and left out, as is loading the models). The same schedule priced in
CPU-seconds gives tokens per CPU-second; the recommendation rests on wall-clock time.

The recommendation is the fastest N, but only when it beats plain decoding by at least
`MARGIN`: a smaller predicted gain is within what two runs of one setting differ by on a
shared machine, and MTP off is then the safer choice (no head in memory, no wasted drafts
when the prompts change).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .schedule import Decoding, StepCosts, seconds, total_schedule

MARGIN = 0.05  # a recommended N must be predicted at least this much faster than plain decoding


@dataclass(frozen=True)
class Prediction:
    draft: int
    tokens_per_second: float
    speedup: float  # over plain decoding (draft 0), both predicted from the same costs
    tokens_per_cpu_second: float  # the same prediction priced in CPU-seconds
    tokens: int  # generated tokens the prediction covers
    rounds: int  # speculative rounds (0 for plain decoding)
    accepted: int  # drafts accepted
    proposed: int  # drafts made
    target_forwards: int
    draft_forwards: int

    @property
    def tokens_per_round(self) -> float | None:
        return (self.tokens / self.rounds) if self.rounds else None

    @property
    def acceptance_rate(self) -> float | None:
        return (self.accepted / self.proposed) if self.proposed else None


def _rate(tokens: int, spent: float) -> float:
    return tokens / spent if spent > 0 else float("inf")


def predict(
    decodings: Sequence[Decoding], costs: StepCosts, max_draft: int, cpu_costs: StepCosts | None = None,
    window: int = 0,
) -> tuple[Prediction, ...]:
    """One prediction per draft count 0..max_draft (`cpu_costs`: CPU-seconds, default `costs`) for a package whose
    state window is `window` (0: none; a windowed package crops instead of replaying at 2 drafts or more)."""
    results = []
    plain_rate = None
    for draft in range(max_draft + 1):
        plan = total_schedule(decodings, draft, window)
        rate = _rate(plan.tokens, seconds(plan, costs))
        if draft == 0:
            plain_rate = rate
        results.append(
            Prediction(
                draft=draft,
                tokens_per_second=rate,
                speedup=rate / plain_rate if plain_rate else 1.0,
                tokens_per_cpu_second=_rate(plan.tokens, seconds(plan, cpu_costs or costs)),
                tokens=plan.tokens,
                rounds=plan.rounds,
                accepted=plan.accepted,
                proposed=plan.proposed,
                target_forwards=plan.target_forwards if draft else plan.count("plain_step"),
                draft_forwards=plan.draft_forwards,
            )
        )
    return tuple(results)


def recommend(predictions: Sequence[Prediction], margin: float = MARGIN) -> int:
    """The draft count to use: the fastest, if it beats plain decoding by `margin`; else 0 (MTP off)."""
    best = max(predictions, key=lambda p: (p.tokens_per_second, -p.draft))
    return best.draft if best.draft and best.speedup >= 1 + margin else 0
