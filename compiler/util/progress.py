"""What a verb says on stderr while it works: phase lines, `-v` detail, and byte progress for the weights.

The weights are read, converted and written as one stream (an `.onnx.data` file is
produced chunk by chunk while it is written), so the bytes written measure the
whole weight phase. On a terminal that is a tqdm bar with rate and ETA; anywhere
else (CI logs, a file) it is a plain line every MTPC_PROGRESS_INTERVAL seconds
(default 10) and at every tenth of the way (at most one a second), so a log
shows steady progress without a line per chunk. `-q` silences all of it; `-v` adds elapsed times to
each line and a line per file written.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from . import interrupts

# Seconds between two plain progress lines (CI logs); a test sets it to 0 for a line per chunk.
INTERVAL_ENV = "MTPC_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 10.0
_STEPS = 10  # plain lines also at every tenth of the total,
_STEP_GAP = 1.0  # but at most one a second: a write that takes a second needs only its closing line


def human_size(n: int | float) -> str:
    """Bytes in binary units, about three significant digits: `532 B`, `5.20 KiB`, `14.9 GiB`, `731 MiB`."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024
        if n < 1000 or unit == "PiB":
            break
    return f"{n:.0f} {unit}" if n >= 100 else f"{n:.1f} {unit}" if n >= 10 else f"{n:.2f} {unit}"


def human_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL)))
    except ValueError:
        return DEFAULT_INTERVAL


def _safe_write(stream: TextIO, text: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except OSError:
        pass  # stderr's reader is gone: the run goes on, and its end reports that (exit 141)


# Notes that come from below the verbs (a recovered write, `mtpc.output.journal`) follow the verb's -q: `quiet_notes`.
_notes_quiet = False


def note(message: str) -> None:
    """`mtpc: note: ...` on stderr, unless the run is quiet (`-q`)."""
    if not _notes_quiet:
        _safe_write(sys.stderr, f"mtpc: note: {message}\n")


class quiet_notes:
    """Within the block, `note` says nothing when `quiet`: a verb run with -q."""

    def __init__(self, quiet: bool):
        self.quiet = quiet

    def __enter__(self) -> None:
        global _notes_quiet
        self.previous, _notes_quiet = _notes_quiet, self.quiet

    def __exit__(self, *exc) -> None:
        global _notes_quiet
        _notes_quiet = self.previous


class Console:
    """A verb's stderr: `console(message)` is a progress line, `detail` a `-v` line; `weights` measures bytes.

    Callable, so it is what `driver.build(progress=...)` takes."""

    def __init__(self, *, quiet: bool = False, verbose: int = 0, stream: TextIO | None = None):
        self.quiet, self.verbose = quiet, verbose
        self._stream = stream
        self._start = time.monotonic()

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _line(self, message: str) -> None:
        stamp = f"[{time.monotonic() - self._start:6.1f}s] " if self.verbose else ""
        _safe_write(self.stream, f"mtpc: {stamp}{message}\n")

    def __call__(self, message: str) -> None:
        interrupts.raise_if_swallowed()  # each phase is a point where an interrupt lost in a callback is answered
        if not self.quiet:
            self._line(message)

    def detail(self, message: str) -> None:
        if self.verbose and not self.quiet:
            self._line(message)

    def weights(self, total: int, label: str = "writing") -> "ByteProgress":
        return ByteProgress(self, total, label)


class ByteProgress:
    """Bytes written out of `total`, reported as the writer goes (see the module's docstring).

    The writer (`output.write_package`) calls `file_started` before each file and `advance`
    after each chunk; `close` ends the bar and says how long it all took."""

    def __init__(self, console: Console, total: int, label: str):
        self.console, self.total, self.label = console, max(0, int(total)), label
        self.done = 0
        self._start = self._last_line = time.monotonic()
        self._next_step = 1
        self._interval = _interval()
        self._file: tuple[str, float, int] | None = None
        self._bar = None
        if not console.quiet and self.total and console.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, unit="B", unit_scale=True, unit_divisor=1024, desc=f"mtpc: {label}",
                file=console.stream, mininterval=0.2, dynamic_ncols=True, leave=False,
            )

    # ---- called by the writer

    def file_started(self, relpath: str) -> None:
        self._end_file()
        self._file = (relpath, time.monotonic(), self.done)

    def advance(self, n: int) -> None:
        interrupts.raise_if_swallowed()
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        if self.console.quiet or not self.total:
            return
        now = time.monotonic()
        since = now - self._last_line
        step_reached = self.done * _STEPS >= self._next_step * self.total and since >= min(_STEP_GAP, self._interval)
        if step_reached or since >= self._interval:
            while self._next_step * self.total <= self.done * _STEPS:
                self._next_step += 1
            self._last_line = now
            self.console(self._status(now))

    def close(self, finished: bool = True) -> None:
        """End the bar; a finished write also gets its closing line (total, time, rate)."""
        if finished:
            self._end_file()
        self._file = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if not finished:
            return
        elapsed = time.monotonic() - self._start
        rate = f", {human_size(self.done / elapsed)}/s" if elapsed > 0 else ""
        self.console(f"{self.label}: {human_size(self.done)} in {human_duration(elapsed)}{rate}")

    # ---- what is shown

    def _status(self, now: float) -> str:
        elapsed = now - self._start
        total = max(self.total, self.done)  # a file longer than it declared must not read as 110 %
        text = f"{self.label}: {human_size(self.done)} / {human_size(total)} ({100 * self.done // total} %)"
        if elapsed > 0 and self.done:
            rate = self.done / elapsed
            text += f", {human_size(rate)}/s, ETA {human_duration((total - self.done) / rate)}"
        return text

    def _end_file(self) -> None:
        if self._file is None:
            return
        relpath, started, done_before = self._file
        self._file = None
        if not self.console.verbose or self.console.quiet:
            return
        message = f"wrote {relpath} ({human_size(self.done - done_before)}, {time.monotonic() - started:.2f} s)"
        if self._bar is not None:
            self._bar.write(f"mtpc: {message}", file=self.console.stream)
        else:
            self.console.detail(message)
