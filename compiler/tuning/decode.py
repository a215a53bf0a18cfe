"""Plain greedy and MTP speculative decoding of a package in onnxruntime-genai, timed round by round.

`decode(runtime, prompt, steps, drafts)` decodes a prompt with a loaded `runtime.Runtime`:

- `drafts` 0: `og.Generator`, sampling off: one main forward per token;
- `drafts` N: `og.MtpGenerator` with `max_draft_tokens` N. Each call of `generate_next_token`
  either runs a speculative round (N chained head forwards, one verify forward of N + 1 tokens
  and, after a rejection, a state restore and a replay) or hands out a token a round already
  committed. The runtime's counters (`get_stats`) are read after every call, so each round is
  recorded with its drafts, how many of them the main model accepted, and its wall time.

Only the decoding loop is timed (the prompt's forward is left out), in wall and CPU seconds of
this process (all threads): tokens per CPU-second do not count the time spent waiting for a core
that another job holds. Reading the counters costs ~20 us a call, well under a percent of a step
of any real model; the wall time is the sum of the `generate_next_token` calls alone. What `tune`
predicts per N is what this measures (bench/tune_accuracy.py holds one against the other).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from .runtime import Runtime, refusal


@dataclass(frozen=True)
class Round:
    """One speculative round as the runtime's counters tell it."""

    drafted: int  # drafts the head proposed
    accepted: int  # the prefix of them the main model agreed with
    seconds: float  # wall time of the call that ran it (drafts, verify, any replay, the runtime's work)


@dataclass(frozen=True)
class Run:
    tokens: tuple[int, ...]  # the tokens decoded after the prompt, an end token included (a step made it)
    wall_s: float
    cpu_s: float
    rounds: tuple[Round, ...] = ()  # speculative runs only
    main_forwards: int = 0  # speculative runs: the runtime's count of main-model forwards (prompt included)
    head_forwards: int = 0

    @property
    def tok_s(self) -> float:
        return len(self.tokens) / self.wall_s

    @property
    def tok_cpu_s(self) -> float:
        return len(self.tokens) / self.cpu_s if self.cpu_s > 0 else float("inf")

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.rounds)

    @property
    def drafted(self) -> int:
        return sum(r.drafted for r in self.rounds)

    @property
    def rejected(self) -> int:
        """Drafts the main model verified and refused (at most one per round)."""
        return sum(1 for r in self.rounds if r.accepted < r.drafted)


def decode(runtime: Runtime, prompt: Sequence[int], steps: int, drafts: int = 0) -> Run:
    """`steps` tokens after `prompt` (fewer when an end token comes first), plain or with `drafts` drafts."""
    with refusal("onnxruntime-genai could not decode the package"):
        return _speculative(runtime, prompt, steps, drafts) if drafts else _greedy(runtime, prompt, steps)


def _greedy(runtime: Runtime, prompt: Sequence[int], steps: int) -> Run:
    generator = runtime.generator(runtime.main, len(prompt) + steps)
    generator.append_tokens(list(prompt))
    cpu, start = time.process_time(), time.perf_counter()
    while not generator.is_done():
        generator.generate_next_token()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    tokens = [int(t) for t in generator.get_sequence(0)][len(prompt):]
    if len(tokens) < steps:
        # Stopped at an end token, which og.Generator leaves out of its sequence; og.MtpGenerator commits it.
        tokens.append(int(generator.get_next_tokens()[0]))
    return Run(tuple(tokens), wall, cpu)


def _speculative(runtime: Runtime, prompt: Sequence[int], steps: int, drafts: int) -> Run:
    generator = runtime.generator(runtime.main, len(prompt) + steps, drafts)
    generator.append_tokens(list(prompt))
    before = generator.get_stats()
    rounds: list[Round] = []
    wall, cpu = 0.0, time.process_time()
    while not generator.is_done():
        start = time.perf_counter()
        generator.generate_next_token()
        took = time.perf_counter() - start
        wall += took
        after = generator.get_stats()
        if after["rounds"] != before["rounds"]:
            rounds.append(Round(after["draft_tokens_proposed"] - before["draft_tokens_proposed"],
                                after["draft_tokens_accepted"] - before["draft_tokens_accepted"], took))
        before = after
    cpu = time.process_time() - cpu
    tokens = [int(t) for t in generator.get_sequence()][len(prompt):]
    # A round's verify may commit tokens past an end token; decoding ends at the first one.
    end = next((i + 1 for i, t in enumerate(tokens) if t in runtime.package.eos_token_ids), len(tokens))
    return Run(tuple(tokens[:end]), wall, cpu, tuple(rounds),
               int(before["target_forward_passes"]), int(before["draft_forward_passes"]))


def round_acceptance(rounds: Sequence[Round], max_draft: int) -> tuple[float | None, ...]:
    """For k = 1..max_draft: of the rounds whose k-th draft the main model judged (drafts 1..k-1
    accepted), the share that accepted it; None where no round got that far. (`schedule.acceptance_by_position`
    counts the same from where the head's drafts match, without running og.MtpGenerator.)"""
    shares: list[float | None] = []
    for k in range(1, max_draft + 1):
        judged = [r for r in rounds if r.drafted >= k and r.accepted >= k - 1]
        shares.append(sum(r.accepted >= k for r in judged) / len(judged) if judged else None)
    return tuple(shares)


def tokens_per_round(rounds: Sequence[Round]) -> float:
    """Tokens a round commits on average: its accepted drafts and the main model's own next token."""
    return sum(r.accepted + 1 for r in rounds) / len(rounds) if rounds else 0.0
