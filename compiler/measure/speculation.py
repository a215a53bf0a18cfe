"""Plain greedy and MTP speculative decoding of a package in onnxruntime-genai, timed round by round.

A `PackageDecoder` loads a package's main model (and its MTP head, when it has one) with the
session options given (threads, profiling), and decodes a prompt:

- `greedy`: `og.Generator`, sampling off: one main forward per token;
- `speculative`: `og.MtpGenerator` with `max_draft_tokens` N. Each call of `generate_next_token`
  either runs a speculative round (N chained head forwards, one verify forward of N + 1 tokens
  and, after a rejection, a state restore and a replay) or hands out a token a round already
  committed. The runtime's counters (`get_stats`) are read after every call, so each round is
  recorded with its drafts, how many of them the main model accepted, and its wall time.

Both time only the decoding loop (the prompt's forward is left out) in wall and CPU seconds
(user + system of this process, all threads): tokens per CPU-second do not count the time spent
waiting for a core that another job holds. Reading the counters costs ~20 us a call, well under a
percent of a step of any real model; the wall time is the sum of the `generate_next_token` calls
alone.
"""

from __future__ import annotations

import json
import resource
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

GENAI_CONFIG = "genai_config.json"


@dataclass(frozen=True)
class Round:
    """One speculative round as the runtime's counters tell it."""

    drafted: int  # drafts the head proposed
    accepted: int  # the prefix of them the main model agreed with
    seconds: float  # wall time of the call that ran it (drafts, verify, any replay, the runtime's work)


@dataclass(frozen=True)
class Run:
    tokens: tuple[int, ...]  # the tokens decoded after the prompt
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


def head_folder(root: Path, config: dict) -> Path | None:
    """The folder whose genai_config.json makes the package's MTP head an og.Model of its own."""
    head_file = ((config.get("model") or {}).get("mtp") or {}).get("filename")
    if not head_file:
        return None
    for sub in sorted(root.rglob(GENAI_CONFIG)):
        if sub.parent == root:
            continue
        decoder = (json.loads(sub.read_text("utf-8")).get("model") or {}).get("decoder") or {}
        relpath = PurePosixPath(sub.parent.relative_to(root).as_posix()) / str(decoder.get("filename", ""))
        if str(relpath) == head_file:
            return sub.parent
    return None


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class PackageDecoder:
    """A package's main model and head, loaded once, with `session_options` laid over both configs
    (e.g. `{"intra_op_num_threads": 1}`); `head_session_options` apply to the head only, after those."""

    def __init__(self, package: str | Path, session_options: dict[str, Any] | None = None,
                 head_session_options: dict[str, Any] | None = None):
        import onnxruntime_genai as og

        self.package = Path(package)
        config = json.loads((self.package / GENAI_CONFIG).read_text("utf-8"))
        eos = (config.get("model") or {}).get("eos_token_id", [])
        self.eos = frozenset(eos if isinstance(eos, list) else [eos])
        self.main = og.Model(self._config(self.package, session_options or {}))
        folder = head_folder(self.package, config)
        head_options = {**(session_options or {}), **(head_session_options or {})}
        self.head = og.Model(self._config(folder, head_options)) if folder is not None else None

    @staticmethod
    def _config(folder: Path, session_options: dict[str, Any]):
        import onnxruntime_genai as og

        config = og.Config(str(folder))
        if session_options:
            config.overlay(json.dumps({"model": {"decoder": {"session_options": session_options}}}))
        return config

    def _params(self, prompt: Sequence[int], steps: int):
        import onnxruntime_genai as og

        params = og.GeneratorParams(self.main)
        # No min_length: it would turn on the runtime's logits processing, a slower path for MTP's verify
        # than plain argmax. An eos ends a run early; `Run.tokens` says how many were decoded.
        params.set_search_options(do_sample=False, max_length=len(prompt) + steps)
        return params

    def _decoded(self, sequence, prompt: Sequence[int]) -> tuple[int, ...]:
        """The tokens after the prompt, up to an eos (og.Generator leaves the eos out, og.MtpGenerator keeps it)."""
        tokens = [int(t) for t in sequence][len(prompt):]
        end = next((i for i, t in enumerate(tokens) if t in self.eos), len(tokens))
        return tuple(tokens[:end])

    def greedy(self, prompt: Sequence[int], steps: int) -> Run:
        import onnxruntime_genai as og

        generator = og.Generator(self.main, self._params(prompt, steps))
        generator.append_tokens(list(prompt))
        cpu, start = _cpu_seconds(), time.perf_counter()
        while not generator.is_done():
            generator.generate_next_token()
        wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
        return Run(self._decoded(generator.get_sequence(0), prompt), wall, cpu)

    def speculative(self, prompt: Sequence[int], steps: int, max_draft: int) -> Run:
        import onnxruntime_genai as og

        if self.head is None:
            raise ValueError(f"{self.package} has no MTP head")
        params = self._params(prompt, steps)
        params.set_speculative_options(max_draft_tokens=max_draft)
        generator = og.MtpGenerator(self.main, self.head, params)
        generator.append_tokens(list(prompt))
        before = generator.get_stats()
        rounds: list[Round] = []
        wall, cpu = 0.0, _cpu_seconds()
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
        cpu = _cpu_seconds() - cpu
        return Run(self._decoded(generator.get_sequence(), prompt), wall, cpu, tuple(rounds),
                   int(before["target_forward_passes"]), int(before["draft_forward_passes"]))


def acceptance_by_position(rounds: Sequence[Round], max_draft: int) -> tuple[float | None, ...]:
    """For k = 1..max_draft: of the rounds whose k-th draft the main model judged (drafts 1..k-1
    accepted), the share that accepted it; None where no round got that far."""
    shares: list[float | None] = []
    for k in range(1, max_draft + 1):
        judged = [r for r in rounds if r.drafted >= k and r.accepted >= k - 1]
        shares.append(sum(r.accepted >= k for r in judged) / len(judged) if judged else None)
    return tuple(shares)


def tokens_per_round(rounds: Sequence[Round]) -> float:
    """Tokens a round commits on average: its accepted drafts and the main model's own next token."""
    return sum(r.accepted + 1 for r in rounds) / len(rounds) if rounds else 0.0
