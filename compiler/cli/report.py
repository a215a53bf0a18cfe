"""How every verb talks: text for people, JSON for programs, errors on stderr.

JSON output is one object on stdout carrying `format_version` and `ok`, so
scripts can rely on its shape; text goes to stdout, progress and summaries to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..util.diagnostics import MtpcError
from ..util.user_files import existing_file  # noqa: F401  (the verbs name it from here)

FORMAT_VERSION = 1


def print_json(command: str, payload: dict, *, ok: bool | None = None) -> None:
    """One JSON result on stdout. Every result says whether it is `ok`, so a script needs no per-verb logic."""
    if ok is None:
        ok = payload.get("ok")
    if not isinstance(ok, bool):
        raise ValueError(f"the JSON result of {command!r} must say whether it is ok")
    doc = {"format_version": FORMAT_VERSION, "command": command, **payload, "ok": ok}
    out(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, default=str))


def print_json_error(command: str, error: MtpcError) -> None:
    """The one JSON shape of a failed run, whether argparse or a verb refused it."""
    diagnostics = [d.to_json() for d in error.diagnostics]
    print_json(command, {"ok": False, "exit_code": int(error.exit_code), "diagnostics": diagnostics})


def out(line: str = "") -> None:
    """A line (or a whole document) on stdout. A reader that goes away before it is all written raises
    BrokenPipeError here, whatever its size (`main` answers with exit 141)."""
    text = line + "\n"
    if len(text) < _WHOLE_WRITE:
        sys.stdout.write(text)  # buffered; a closed pipe shows when the buffer is flushed
        return
    # Python's text layer hands a long text to the byte buffer in one call and ignores how much of it was
    # written: when the reader leaves mid-way the rest is dropped without an error (exit 0 or 1, not 141).
    # Written here piece by piece until all of it is taken, or the pipe says it is closed.
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a replaced stdout (a test's, an IDE's): its own write is all there is
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    data = memoryview(text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"))
    while data:
        written = buffer.write(data)
        if written is None:  # a non-blocking stdout that is full: wait until it takes more
            import select

            select.select([], [buffer], [])
            continue
        data = data[written:]


# Texts shorter than the text layer's own chunk (8 KiB) go through it unharmed.
_WHOLE_WRITE = 4096


def err(line: str) -> None:
    sys.stderr.write(line + "\n")


def console(args):
    """The verb's stderr voice (`mtpc.util.progress.Console`): silent with -q, and for JSON output
    (a script reads stdout and wants nothing else); -v adds elapsed times and detail."""
    from ..util.progress import Console

    quiet = bool(getattr(args, "quiet", False)) or getattr(args, "format", "text") == "json"
    return Console(quiet=quiet, verbose=int(getattr(args, "verbose", 0) or 0))


def verb_parser(sub, name: str, help: str, epilog: str, formats: tuple[str, ...] = ("text", "json")):
    """A verb's sub-parser with the options every verb shares."""
    import argparse

    p = sub.add_parser(
        name, help=help, description=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--format", choices=formats, default="text", help=f"output format: {', '.join(formats)} (json carries format_version)"
    )
    p.add_argument("--traceback", action="store_true", help="show the Python traceback of an internal error")
    p.add_argument("-q", "--quiet", action="store_true", help="nothing on stderr but errors: no progress, notes or summary")
    p.add_argument(
        "-v", "--verbose", action="count", default=0,
        help="more on stderr: elapsed time on each progress line and a line per file or step",
    )
    return p


def whole_number(least: int, most: int | None = None):
    """An argparse type: an integer in [least, most]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least or (most is not None and value > most):
            bounds = f"from {least} to {most}" if most is not None else f"at least {least}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    parse.__name__ = "whole number"
    return parse
