"""SIGINT and SIGTERM, answered one way: the run stops where it is, says so in one line, and exits 130 or 143.

The `mtpc` command installs `on_signal` for both before it imports anything heavy. The handler
records the signal, ignores any later one (so the cleanup it starts is not cut short), and raises
`Interrupted` where the program is, so every `finally` on the way out runs. Python runs a signal
handler between any two bytecodes of the main thread, including inside a weakref callback or a
`__del__` (the import system's module-lock callbacks run on every import). An exception raised
there cannot propagate: Python prints "Exception ignored in ..." and goes on. So the record, not
the exception, is what counts: the run asks `raise_if_swallowed` where it decides things (each
file written, before the package is swapped in, each progress line) and `main` asks
`raise_if_received` before it exits, and a swallowed interrupt ends the run there, silently
(`unraisable_hook` keeps Python's report of it off stderr).

`main` decides how it exits (`decide`); from then on a signal is recorded nowhere and ends nothing,
and the command exits at once (no interpreter shutdown for a signal to land in).

`settle(outcome)` says what an interrupt from now on leaves behind (a compile: the folder as it was,
then the new package once it is in place); the one line on stderr says it.

Test-only: MTPC_TEST_KILL_AT=<point>[:<SIGNAL>[:finalizer]] makes the process signal itself (SIGKILL
unless named) at one of KILL_POINTS, so tests interrupt a real run exactly there
(tests/output/test_interrupted_runs.py); `finalizer` raises the signal from inside a weakref
callback, where Python swallows what the handler raises, as when Ctrl-C lands in an import.
Unset, as it always is outside tests, it costs one comparison per point.
"""

from __future__ import annotations

import os
import signal
import sys

SIGNAL_NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}

# Where a test may interrupt a run: "startup" (handlers in place, the verbs not imported yet), the package
# write's points (compiler/output/write.py), "reporting" (compile's package in place, its summary not printed)
# and "exiting" (after `decide`).
KILL_POINTS = ("startup", "mid-write", "before-swap", "between-renames", "after-swap", "mid-discard", "reporting",
               "exiting")


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised where the program is so every `finally` and cleanup on the way out runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _State:
    received: int | None = None  # the first signal, once its handler has run
    swallowed = False  # its Interrupted was lost in a callback Python could not raise from
    decided = False  # `main` has decided how it exits: signals are ignored from here
    outcome: str | None = None  # what an interrupt now leaves behind, for the line that reports it


_state = _State()
_previous_hook = None


def on_signal(signum: int, frame) -> None:
    if _state.decided:
        return
    # The first signal ends the run; later ones are ignored so the cleanup it triggers is not cut short.
    for other in SIGNAL_NAMES:
        signal.signal(other, signal.SIG_IGN)
    if _state.received is None:
        _state.received = signum
    raise Interrupted(_state.received)


def unraisable_hook(unraisable) -> None:
    """Python's report of an exception it could not raise (from a callback or `__del__`), except an interrupt's:
    that one is remembered, and the run stops at its next decision instead."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _state.received is not None:
        _state.swallowed = True
        return
    (_previous_hook or sys.__unraisablehook__)(unraisable)


def install() -> dict:
    """Our handlers for SIGINT and SIGTERM, a fresh record, and the unraisable hook; returns what was there
    (`restore` puts it back, for a program that calls `main` in-process). Outside the main thread, nothing:
    signals are not ours to handle there."""
    global _previous_hook
    previous: dict = {}
    try:
        for signum in SIGNAL_NAMES:
            previous[signum] = signal.signal(signum, on_signal)
    except ValueError:  # not the main thread
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        return {}
    _state.__dict__.clear()  # the class defaults: nothing received, nothing decided
    previous["unraisablehook"] = sys.unraisablehook
    if sys.unraisablehook is not unraisable_hook:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = unraisable_hook
    return previous


def installed() -> bool:
    return signal.getsignal(signal.SIGTERM) is on_signal or _state.received is not None


def restore(previous: dict) -> None:
    previous = dict(previous)
    hook = previous.pop("unraisablehook", None)
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    if hook is not None:
        sys.unraisablehook = hook


def received() -> int | None:
    return _state.received


def raise_if_swallowed() -> None:
    """Where the run decides something: an interrupt whose exception was lost (see the module's docstring) ends it here."""
    if _state.swallowed and not _state.decided:
        _state.swallowed = False
        raise Interrupted(_state.received)


def raise_if_received() -> None:
    if _state.received is not None:
        raise Interrupted(_state.received)


def decide() -> None:
    """From here on, a signal changes nothing: the run has decided how it exits."""
    _state.decided = True


def settle(outcome: str | None) -> None:
    """What an interrupt from now on leaves behind, said on the line that reports it (None: nothing to say)."""
    _state.outcome = outcome


def outcome() -> str | None:
    return _state.outcome


def test_point(name: str) -> None:
    """A place tests may interrupt a run (see the module's docstring); does nothing unless MTPC_TEST_KILL_AT names it."""
    if _KILL_AT is None:
        return
    point, _, rest = _KILL_AT.partition(":")
    if point != name:
        return
    signame, _, how = rest.partition(":")
    signum = getattr(signal, signame or "SIGKILL")
    if how == "finalizer":
        import weakref

        class _Target:
            pass

        target = _Target()
        # Raised inside the callback: what the handler raises there is lost, as in the import system's callbacks.
        keep = weakref.ref(target, lambda ref: signal.raise_signal(signum))
        del target
        del keep
        return
    os.kill(os.getpid(), signum)


_KILL_AT = os.environ.get("MTPC_TEST_KILL_AT")
