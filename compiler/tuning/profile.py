"""Where an MTP speculative round's time goes: head forwards, the verify forward, replays, the runtime's own work.

`profile_speculative` decodes (`decode.decode`) with onnxruntime's profiler on in both sessions (the
main model's and the head's), then splits each round's wall time (`decode.Round.seconds`) into:

- **head**: the head's forwards (N chained drafts, or one forward of the accepted drafts and the
  next token: onnxruntime-genai 0.18.0 fuses the head's catch-up into the next round's first draft);
- **verify**: the main model's forward over [token, drafts] (N + 1 tokens);
- **replay**: after a rejection, the main model's forward of the accepted prefix again
  (onnxruntime-genai restores a snapshot of the recurrent state first); a package with a state
  window has none at 2 drafts or more: the runtime crops the window to the accepted token instead;
- **runtime**: everything else inside the call: the host-side argmax over each logits row, the
  logits' cast to float32, state snapshots and restores, copies of hidden rows, the Python call.

Each round's main-model forwards are its verify and, when it rejected a draft, a replay (the
order onnxruntime-genai runs them in; the runtime's counters say which rounds rejected). The profiler adds a few microseconds to every node, so
forwards measure a little dearer than unprofiled ones and `runtime` is the remainder of the same
profiled run. `profile_plain` gives the plain decode step in the same terms.

`mtpc tune` times each operation by itself instead (`measure`), to price any N; this takes real
og.MtpGenerator rounds apart, for bench/decode_profile.py --mtp.
"""

from __future__ import annotations

import gc
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Sequence

from .decode import Run, decode
from .runtime import Runtime
from .package import open_package


@dataclass(frozen=True)
class RoundProfile:
    """Milliseconds per round of each part, averaged over a run's rounds, and the counts behind them."""

    drafts: int
    rounds: int
    tokens: int
    head_ms: float
    verify_ms: float
    replay_ms: float
    runtime_ms: float
    head_forwards: int
    replays: int

    @property
    def round_ms(self) -> float:
        return self.head_ms + self.verify_ms + self.replay_ms + self.runtime_ms

    @property
    def ms_per_token(self) -> float:
        return self.round_ms * self.rounds / self.tokens


@dataclass(frozen=True)
class _Forward:
    start_us: int
    duration_us: int


def _forwards(events: list[dict]) -> list[_Forward]:
    """A session's runs in the order they ran."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"])
    return [_Forward(run["ts"], run["dur"]) for run in runs]


def _profiled(package: Path, options: dict[str, Any], decoding) -> tuple[Run, list[_Forward], list[_Forward]]:
    with tempfile.TemporaryDirectory(prefix="mtpc-profile-") as tmp:
        main, head = str(Path(tmp) / "main"), str(Path(tmp) / "head")
        runtime = Runtime(open_package(package, needs_tokenizer=False), session_options={**options, "enable_profiling": main},
                          head_session_options={"enable_profiling": head})
        run = decoding(runtime)
        del runtime
        gc.collect()  # the sessions write their profiles when they close
        parsed = []
        for prefix in (main, head):
            files = sorted(Path(tmp).glob(Path(prefix).name + "*.json"))
            parsed.append(_forwards(json.loads(files[-1].read_text())) if files else [])
    return run, parsed[0], parsed[1]


def profile_speculative(package: str | Path, prompt: Sequence[int], steps: int, drafts: int,
                        session_options: dict[str, Any] | None = None) -> RoundProfile:
    run, main, head = _profiled(Path(package), session_options or {},
                                lambda runtime: decode(runtime, prompt, steps, drafts))
    crop = open_package(package, needs_tokenizer=False).state_window > 1 and drafts > 1
    verify, replay = _split(main[1:], run, crop)  # the first forward is the prompt's
    rounds = max(1, len(run.rounds))
    per_round = lambda forwards: sum(f.duration_us for f in forwards) / 1000 / rounds  # noqa: E731
    total = sum(r.seconds for r in run.rounds) * 1000 / rounds
    head_ms, verify_ms, replay_ms = per_round(head), per_round(verify), per_round(replay)
    return RoundProfile(drafts, len(run.rounds), len(run.tokens), head_ms, verify_ms, replay_ms,
                     max(0.0, total - head_ms - verify_ms - replay_ms), len(head), len(replay))


def _split(forwards: list[_Forward], run: Run, crop: bool = False) -> tuple[list[_Forward], list[_Forward]]:
    """The main model's forwards of each round: its verify, then a replay when it rejected a draft (none when the
    runtime crops a windowed state instead)."""
    replays = 0 if crop else run.rejected
    if len(forwards) != len(run.rounds) + replays:
        raise ValueError(f"{len(forwards)} main-model forwards for {len(run.rounds)} rounds and {replays} replays")
    verify, replay, at = [], [], iter(forwards)
    for r in run.rounds:
        verify.append(next(at))
        if r.accepted < r.drafted and not crop:
            replay.append(next(at))
    return verify, replay


def profile_plain(package: str | Path, prompt: Sequence[int], steps: int,
                  session_options: dict[str, Any] | None = None) -> tuple[float, float]:
    """(ms per token of the whole `generate_next_token` call, median ms of the forward in it)."""
    run, main, _ = _profiled(Path(package), session_options or {}, lambda runtime: decode(runtime, prompt, steps))
    return run.wall_s * 1000 / max(1, len(run.tokens)), median(f.duration_us for f in main[1:]) / 1000
