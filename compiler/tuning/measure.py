"""Measuring a package on this machine with onnxruntime-genai: where its drafts match, and what each step costs.

Three passes over the prompts, all through onnxruntime-genai's own `og.Generator` (the
object `og.MtpGenerator` drives for the main model and for the head), so the costs include
the runtime's own work around each forward:

1. plain greedy decoding of every prompt: the tokens every N will emit (speculative
   decoding is lossless) and the baseline;
2. draft matches: the trunk's hidden states over prompt + continuation from one forward,
   then the head fed each generated token with the hidden state before it (as the
   runtime feeds it: only generated tokens, in order), chaining its own drafts and
   hidden output while they equal the continuation, up to `max_draft`. Only the
   matching drafts are chained further, so this costs about one head forward per token;
3. step costs, in interleaved sweeps at the middle of each continuation, each operation
   timed where it sits in a round (what ran just before decides what is still in the
   caches): for every width 1..max_draft + 1, a head forward right after a main forward
   (a round's first draft), a chained one right after it, the head's rewind, a state
   snapshot, a main forward right after the head's (a verify), the restore, another main
   forward right after that (a replay after a rejection), and a plain decoding step right
   after those; each sample taken next to the others so a busy machine slows them alike.
   Each is timed on the wall clock and in CPU-seconds of this process: the first is what a
   user waits for, the second what the work costs whoever else runs (a busy machine barely
   moves it, so it is the number to compare across runs on a shared machine).
   A step's cost is the mean of its samples: decoding takes the sum of its steps' times, so
   the mean is what predicts it under the conditions tune ran in. On a quiet machine a
   median says the same; on a busy one other work stalls a few short steps for long, which
   a median (or any quantile) leaves out and a decoding run does not (measured on this
   project's shared 2-core machine: medians predicted 3x the tokens/s decoding then
   measured, means within the run-to-run spread). The stalls slow every N alike, so the
   recommendation rests on ratios that move less than the absolute numbers.

`mtpc.tuning.schedule` turns the matches into the runtime's rounds for each N, and the
costs into seconds. Nothing here asserts a time; the numbers are what this machine did.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..util.diagnostics import ExitCode, MtpcError
from ..util.lazy_import import lazy_module
from .decode import decode
from .runtime import Runtime, refusal
from .schedule import Decoding, StepCosts

np = lazy_module("numpy")

clock = time.perf_counter
cpu_clock = time.process_time  # every thread of the process: CPU-seconds, whatever the thread count


@dataclass(frozen=True)
class Measurement:
    decodings: tuple[Decoding, ...]
    costs: StepCosts  # wall-clock seconds
    cpu_costs: StepCosts  # CPU-seconds of this process (all its threads)
    samples: int  # samples behind each cost (per width)
    threads: int | None  # intra-op threads asked for (None: the package's own session options)


def greedy(runtime: Runtime, prompt: list[int], new_tokens: int) -> list[int]:
    """The tokens plain greedy decoding gives after `prompt` (every N emits these), an end token included."""
    return list(decode(runtime, prompt, new_tokens).tokens)


def past_the_end(runtime: Runtime, prompt: list[int], generated: list[int], count: int) -> list[int]:
    """The main model's greedy tokens after an end token. Never emitted, but a verify checks drafts against
    them, so the runtime counts the drafts that match them as accepted."""
    with refusal("onnxruntime-genai could not run the package past an end token"):
        generator = runtime.generator(runtime.main, len(prompt) + len(generated) + count + 1)
        generator.append_tokens(prompt + generated)
        found = []
        for _ in range(count):
            found.append(int(np.argmax(generator.get_logits()[0, -1])))
            generator.append_tokens(np.asarray(found[-1:], np.int32))
        return found


def draft_matches(runtime: Runtime, prompt: list[int], generated: list[int], max_draft: int, beyond: Sequence[int] = ()) -> tuple[int, ...]:
    """Per generated token: how many drafts chained from it equal the tokens that follow (at most max_draft);
    `beyond`: what the main model would say after an end token that ends `generated`."""
    package = runtime.package
    following = list(generated) + list(beyond)
    length = len(prompt) + len(generated) + max_draft + 2
    with refusal("onnxruntime-genai could not run the package to find where the drafts match"):
        main = runtime.generator(runtime.main, length)
        main.append_tokens(prompt + generated)
        hidden = main.get_output(package.main_hidden)  # [1, prompt + generated, hidden]
        head = runtime.generator(runtime.head, length)
        matches = []
        for i, token in enumerate(generated[:-1]):
            # The runtime seeds the head with the hidden state that predicted `token`.
            position = len(prompt) + i - 1
            head.set_hidden_states(np.ascontiguousarray(hidden[:, position : position + 1]))
            head.append_tokens(np.asarray([token], np.int32))
            committed = head.token_count()
            matched, reachable = 0, min(max_draft, len(following) - 1 - i)
            while matched < reachable:
                draft = int(np.argmax(head.get_logits()[0, -1]))
                if draft != following[i + 1 + matched]:
                    break
                matched += 1
                if matched < reachable:  # chain: the head's own hidden output seeds the next draft
                    head.set_hidden_states(np.ascontiguousarray(head.get_output(package.head_hidden)[:, -1:]))
                    head.append_tokens(np.asarray([draft], np.int32))
            if head.token_count() != committed:
                head.rewind_to(committed)
            matches.append(matched)
        return tuple(matches) + (0,)  # the last token has nothing after it to draft


@dataclass
class _Samples:
    plain: list
    verify: dict
    replay: dict
    head: dict
    head_chain: list
    snapshot: list
    restore: list
    head_rewind: list

    @classmethod
    def empty(cls, widths: int) -> "_Samples":
        per_width = lambda: {w: [] for w in range(1, widths + 1)}  # noqa: E731
        return cls([], per_width(), per_width(), per_width(), [], [], [], [])

    def costs(self, clock: int) -> StepCosts:
        """The mean of each operation's samples on `clock` (0: wall, 1: CPU)."""

        def mean(samples):
            return statistics.fmean(sample[clock] for sample in samples)

        return StepCosts(
            # Continuations that all end at once leave no plain step to time: a 1-token replay is one.
            plain_step=mean(self.plain or self.replay[1]),
            verify=tuple(mean(self.verify[w]) for w in sorted(self.verify)),
            replay=tuple(mean(self.replay[w]) for w in sorted(self.replay)),
            head_forward=tuple(mean(self.head[w]) for w in sorted(self.head)),
            head_chain=mean(self.head_chain),
            snapshot=mean(self.snapshot),
            restore=mean(self.restore),
            head_rewind=mean(self.head_rewind),
        )


def _timed(call, *args) -> tuple[float, float]:
    """(wall-clock, CPU) seconds of one call."""
    wall, cpu = clock(), cpu_clock()
    call(*args)
    return clock() - wall, cpu_clock() - cpu


def _sweeps(runtime: Runtime, prompt: list[int], generated: list[int], max_draft: int, sweeps: int, first: int, samples: _Samples) -> None:
    """`sweeps` samples of every operation at the middle of this prompt's continuation, each where it sits in a
    round: a round's first head forward after a main forward, a chained one after it, a verify after those, a
    replay after the verify, a plain step after main forwards (as in plain decoding)."""
    package, widths = runtime.package, max_draft + 1
    middle = max(1, len(generated) // 2)
    context = prompt + generated[:middle]
    tokens = np.resize(np.asarray(generated[middle:] + generated, np.int32), widths)  # what is fed matters not
    length = len(context) + widths + widths * sweeps + 4
    walk_from = prompt + generated[: max(1, middle - widths * sweeps // 2)]  # plain steps walk through the middle

    def plain_decoder():
        decoder = runtime.generator(runtime.main, length)
        decoder.append_tokens(walk_from)
        decoder.generate_next_token()  # picks from the prompt's logits; each later call is one forward
        return decoder

    with refusal("onnxruntime-genai could not run the package to measure its steps"):
        main = runtime.generator(runtime.main, length)
        main.append_tokens(context)
        at = main.token_count()
        hidden = main.get_output(package.main_hidden)
        head = runtime.generator(runtime.head, length)
        head.set_hidden_states(np.ascontiguousarray(hidden[:, len(prompt) - 1 : -1]))
        head.append_tokens(np.asarray(generated[:middle], np.int32))
        head_at = head.token_count()
        plain = plain_decoder()
        for sweep in range(sweeps):
            order = list(range(1, widths + 1))
            shift = (first + sweep) % widths
            for width in order[shift:] + order[:shift]:
                head.set_hidden_states(np.ascontiguousarray(hidden[:, -width:]))
                samples.head[width].append(_timed(head.append_tokens, tokens[:width]))
                head.set_hidden_states(np.ascontiguousarray(head.get_output(package.head_hidden)[:, -1:]))
                samples.head_chain.append(_timed(head.append_tokens, tokens[:1]))
                samples.head_rewind.append(_timed(head.rewind_to, head_at))
                for kind in (samples.verify, samples.replay):
                    samples.snapshot.append(_timed(main.snapshot_state))
                    kind[width].append(_timed(main.append_tokens, tokens[:width]))
                    samples.restore.append(_timed(main.rewind_to, at))
                if plain.is_done():  # an end token: walk again
                    plain = plain_decoder()
                if not plain.is_done():
                    samples.plain.append(_timed(plain.generate_next_token))


def measure(
    runtime: Runtime,
    prompts: Sequence[list[int]],
    *,
    new_tokens: int,
    max_draft: int,
    sweeps: int,
    progress: Callable[[str], None] = lambda message: None,
) -> Measurement:
    """Decode every prompt plainly, find where the head's drafts match, and time every step kind."""
    decodings = []
    for n, prompt in enumerate(prompts, 1):
        progress(f"prompt {n}/{len(prompts)}: greedy decoding and the head's drafts ({len(prompt)} prompt tokens)")
        generated = greedy(runtime, prompt, new_tokens)
        beyond = past_the_end(runtime, prompt, generated, max_draft) if 0 < len(generated) < new_tokens else []
        matches = draft_matches(runtime, prompt, generated, max_draft, beyond) if generated else ()
        decodings.append(Decoding(len(prompt), new_tokens, tuple(generated), matches))
    samples = _Samples.empty(max_draft + 1)
    usable = [(p, d) for p, d in zip(prompts, decodings) if len(d.generated) >= 2]
    if not usable:
        raise MtpcError.single(
            "every prompt ended after its first generated token (an end token): there are no decoding steps to measure",
            exit_code=ExitCode.USAGE,
            hint="give prompts the model continues, or more --new-tokens",
        )
    share = [sweeps // len(usable) + (k < sweeps % len(usable)) for k in range(len(usable))]
    done = 0
    for (prompt, decoding), count in zip(usable, share):
        if count:
            progress(f"timing decoding steps: sweeps {done + 1}-{done + count} of {sweeps} "
                     f"({5 * (max_draft + 1)} forwards each)")
            _sweeps(runtime, prompt, list(decoding.generated), max_draft, count, done, samples)
            done += count
    return Measurement(tuple(decodings), samples.costs(0), samples.costs(1), sweeps, runtime.threads)
