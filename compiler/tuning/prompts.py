"""The prompts `mtpc tune` decodes: the user's file (one prompt a line), or a built-in handful.

Acceptance depends on what is decoded (code and lists are predictable, prose less so), so
the built-in prompts mix kinds; the user's own prompts are what the answer should be for.
"""

from __future__ import annotations

from pathlib import Path

from ..util.decoding_defaults import TUNE_PROMPTS
from ..util.diagnostics import Diagnostic, ExitCode, MtpcError, Span
from ..util.user_files import read_user_file

BUILT_IN = TUNE_PROMPTS  # the prompts a fitted synthetic head memorises too (mtpc.util.decoding_defaults)


def read_prompts(path: str | Path) -> tuple[tuple[int, str], ...]:
    """(line number, text) of each non-blank line of `path`; an unreadable or empty file is a usage error (exit 2)."""
    raw = read_user_file(path, "prompts file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = text_line(raw, error.start)
        raise MtpcError(
            [Diagnostic(f"prompts file is not UTF-8 text ({error.reason})", span=Span(str(path), line, 1))], ExitCode.USAGE
        ) from None
    prompts = tuple((n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip())
    if not prompts:
        raise MtpcError.single(
            f"prompts file {str(path)!r} holds no prompt (every line is blank)",
            exit_code=ExitCode.USAGE,
            hint="write one prompt a line, or leave --prompts out for the built-in ones",
        )
    return prompts


def text_line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1
