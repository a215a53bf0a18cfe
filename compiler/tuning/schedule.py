"""What onnxruntime-genai 0.18.0's `og.MtpGenerator` does to decode a prompt with N drafts, given where its drafts match.

Greedy speculative decoding emits exactly the greedy tokens, so which drafts are accepted
depends only on where the head's chained drafts agree with the greedy continuation:
`matches[i]` is how many drafts chained from generated token i (the head fed token i and
the trunk's hidden state before it, then its own drafts and hidden output) equal tokens
i+1, i+2, ... (`mtpc.tuning.measure` finds them by running the head). From those this
module replays, for any N, the runtime's rounds as `src/mtp_generator.cpp` runs them:

- every round commits the token predicted last, drafts with the head, verifies
  [token, drafts] in one main forward after snapshotting the recurrent state, and keeps
  the longest agreeing prefix (a drafts) plus the main model's next token;
- N = 1 (`GenerateStepSingle`): one head forward per draft; after an accepted draft the
  next draft is made in the same head forward that feeds the accepted one (2 tokens wide);
  after a rejection the state is restored and the committed token re-run (1 token wide);
- N > 1 (`GenerateStepMulti`): N chained head forwards, the first fed the previous
  round's accepted drafts too (a + 1 tokens wide, after a rewind of the head's cache);
  a partly accepted verify restores the snapshot and replays the committed prefix
  (a + 1 tokens wide);
- with a windowed state (`window` W > 1, `direct_commit` in `GenerateStepMulti`), N > 1 takes no
  snapshot and a partly accepted verify is cropped to the accepted token (a byte copy of one window
  slot per state, `CROP`), never replayed; N = 1 snapshots and replays as without a window; the
  runtime drafts at most W - 1 tokens;
- a round stops as soon as the committed sequence reaches `max_length` or an end token,
  before any replay; near `max_length` a round drafts only as many tokens as fit.

The result, `Schedule`, counts each operation and the counters `MtpGenerator.get_stats()`
reports, so a test can hold the replay against the runtime's own counters; `seconds` prices
a schedule with measured `StepCosts`. N = 0 is plain `og.Generator` decoding.

An operation is named by where it sits in a round as well as by what it computes, because
that changes its cost (the weights it reads are, or are not, still in the caches): a round's
first head forward runs right after a main forward, the chained ones right after a head
forward; a verify right after head forwards, a replay right after a verify; a plain step
right after another plain step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

# Operation kinds a schedule counts; forwards carry their width (tokens fed in one call).
HEAD_FORWARD = "head_forward"  # a round's first head forward (or N = 1's only one), after a main forward
HEAD_CHAIN = "head_chain"  # a chained draft's head forward (1 token), right after another head forward
VERIFY = "verify"  # the main forward over [token, drafts], after the head's forwards
REPLAY = "replay"  # the main forward over the committed prefix after a restore, right after a verify
PLAIN_STEP = "plain_step"  # og.Generator.generate_next_token: one 1-token forward plus picking the token
SNAPSHOT = "snapshot"  # the main model's recurrent state copied before a verify
RESTORE = "restore"  # ... and restored (with the KV cache cropped) after a rejection
HEAD_REWIND = "head_rewind"  # the head's cache cut back to the committed tokens
CROP = "crop"  # a windowed state's accepted slot copied to the slot the next forward reads, instead of a replay


@dataclass(frozen=True)
class Decoding:
    """One prompt decoded greedily: how long it is, what came out, and where the head's drafts match."""

    prompt_tokens: int
    new_tokens: int  # asked for (max_length = prompt + new_tokens)
    generated: tuple[int, ...]  # the greedy tokens; shorter than new_tokens when an end token came first
    # Per generated token i: drafts chained from it that equal generated[i+1:], capped at the largest N.
    # After an end token, the main model's own next tokens count too: the runtime verifies drafts against
    # them (and counts them accepted) before it stops at the end token.
    matches: tuple[int, ...]


@dataclass(frozen=True)
class Schedule:
    """What decoding a set of prompts with N drafts costs in operations, and the runtime's counters for it."""

    draft: int
    tokens: int  # generated tokens (the first comes from the prompt's forward, as in plain decoding)
    rounds: int = 0
    proposed: int = 0  # get_stats()["draft_tokens_proposed"]
    evaluated: int = 0  # ... "draft_tokens_evaluated"
    accepted: int = 0  # ... "draft_tokens_accepted"
    operations: tuple[tuple[str, int, int], ...] = ()  # (kind, width, count), sorted

    def count(self, kind: str, width: int | None = None) -> int:
        return sum(n for k, w, n in self.operations if k == kind and (width is None or w == width))

    @property
    def target_forwards(self) -> int:  # get_stats()["target_forward_passes"]
        return self.count(VERIFY) + self.count(REPLAY)

    @property
    def draft_forwards(self) -> int:  # get_stats()["draft_forward_passes"]
        return self.count(HEAD_FORWARD) + self.count(HEAD_CHAIN)

    def __add__(self, other: "Schedule") -> "Schedule":
        if self.draft != other.draft:
            raise ValueError("schedules of different draft counts do not add")
        ops = Counter({(k, w): n for k, w, n in self.operations})
        ops.update({(k, w): n for k, w, n in other.operations})
        return Schedule(
            self.draft, self.tokens + other.tokens, self.rounds + other.rounds, self.proposed + other.proposed,
            self.evaluated + other.evaluated, self.accepted + other.accepted, _sorted(ops),
        )


def _sorted(ops: Counter) -> tuple[tuple[str, int, int], ...]:
    return tuple((k, w, n) for (k, w), n in sorted(ops.items()) if n)


def schedule(decoding: Decoding, draft: int, window: int = 0) -> Schedule:
    """The operations and counters of decoding `decoding`'s prompt with `draft` drafts per step (0: plain), on a
    package whose state window is `window` (0: none)."""
    tokens = len(decoding.generated)
    if draft == 0:
        return Schedule(0, tokens, operations=_sorted(Counter({(PLAIN_STEP, 1): max(tokens - 1, 0)})))
    planned, crop = draft, window > 1 and draft > 1
    if window > 1:
        draft = min(draft, window - 1)  # the runtime clamps max_draft_tokens to W - 1
    ops: Counter = Counter()
    rounds = proposed = evaluated = accepted = 0
    i = 0  # index of the token the next round commits (predicted by the last forward)
    pending_draft = False  # N = 1: the next draft was made with the last accepted one
    refeed: int | None = None  # N > 1: drafts accepted last round, fed to the head with the next first draft
    # Committing generated[i] ends decoding when it is the last: max_length reached, or an end token.
    while i + 1 < tokens:
        # The round commits generated[i]; max_length leaves room for this many drafts.
        room = decoding.new_tokens - i - 1
        n = 1 if draft == 1 else min(draft, room)
        rounds += 1
        proposed += n
        if draft == 1:
            if not pending_draft:
                ops[(HEAD_FORWARD, 1)] += 1
        else:
            if refeed is not None:
                ops[(HEAD_REWIND, 0)] += 1
            ops[(HEAD_FORWARD, (refeed or 0) + 1)] += 1
            ops[(HEAD_CHAIN, 1)] += n - 1
        if not crop:
            ops[(SNAPSHOT, 0)] += 1
        ops[(VERIFY, n + 1)] += 1
        agreed = min(decoding.matches[i], n)
        evaluated += agreed + 1 if agreed < n else n
        accepted += agreed
        committed = i + 1 + agreed
        if committed >= tokens:  # an accepted draft reached max_length or an end token: stop at once
            break
        if draft == 1:
            pending_draft = agreed == 1
            if pending_draft:
                ops[(HEAD_FORWARD, 2)] += 1
        else:
            refeed = agreed
        if agreed < n and crop:
            ops[(CROP, 0)] += 1
        elif agreed < n:
            ops[(RESTORE, 0)] += 1
            ops[(REPLAY, agreed + 1)] += 1
        i = committed
    return Schedule(planned, tokens, rounds, proposed, evaluated, accepted, _sorted(ops))


def total_schedule(decodings: Sequence[Decoding], draft: int, window: int = 0) -> Schedule:
    result = Schedule(draft, 0)
    for decoding in decodings:
        result = result + schedule(decoding, draft, window)
    return result


@dataclass(frozen=True)
class StepCosts:
    """Seconds each operation takes on this machine (means of interleaved samples)."""

    plain_step: float
    verify: tuple[float, ...]  # [w - 1]: a verify over w tokens
    replay: tuple[float, ...]  # [w - 1]: a replay over w tokens
    head_forward: tuple[float, ...]  # [w - 1]: a round's first head forward over w tokens
    head_chain: float
    snapshot: float
    restore: float
    head_rewind: float

    def of(self, kind: str, width: int) -> float:
        widths = {VERIFY: self.verify, REPLAY: self.replay, HEAD_FORWARD: self.head_forward}
        if kind in widths:
            return widths[kind][width - 1]
        # A crop copies one window slot per state (the 348M checkpoint's: about 1 MiB a layer), microseconds
        # beside a forward; it is not timed apart.
        return {PLAIN_STEP: self.plain_step, HEAD_CHAIN: self.head_chain, SNAPSHOT: self.snapshot,
                RESTORE: self.restore, HEAD_REWIND: self.head_rewind, CROP: 0.0}[kind]


def seconds(plan: Schedule, costs: StepCosts) -> float:
    return sum(n * costs.of(kind, width) for kind, width, n in plan.operations)


def acceptance_by_position(decodings: Sequence[Decoding], max_draft: int) -> tuple[tuple[int, int], ...]:
    """Per draft position k = 1..max_draft: (drafts tried, accepted) where drafts 1..k-1 were accepted.

    Every generated token that has k more tokens after it counts once, as a round starting
    there would: the k-th draft is tried when the first k-1 matched.
    """
    tried, kept = [0] * max_draft, [0] * max_draft
    for d in decodings:
        for i, matched in enumerate(d.matches):
            reachable = min(max_draft, len(d.generated) - 1 - i)  # tokens that were emitted, not past an end token
            for k in range(1, reachable + 1):
                if matched >= k - 1:
                    tried[k - 1] += 1
                    kept[k - 1] += matched >= k
    return tuple(zip(tried, kept))
