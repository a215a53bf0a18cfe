"""Reading a file the user named on the command line (prompts, a tune report): every way it can be unreadable
is a usage error (exit 2) that names the file and says what it was meant to be, never a traceback."""

from __future__ import annotations

from pathlib import Path

from .diagnostics import ExitCode, MtpcError


def read_user_file(path: str | Path, what: str, *, max_bytes: int | None = None, too_large: str = "",
                   hint: str | None = None) -> bytes:
    """The bytes of `path`, `what` it is named as in errors ("prompts file"). With `max_bytes`, a larger file is
    refused unread past that size, with `too_large` saying why it cannot be one."""
    shown = repr(str(path))
    try:
        with Path(path).open("rb") as file:
            raw = file.read() if max_bytes is None else file.read(max_bytes + 1)
    except FileNotFoundError:
        raise MtpcError.single(f"{what} {shown} does not exist", exit_code=ExitCode.USAGE) from None
    except IsADirectoryError:
        raise MtpcError.single(f"{what} {shown} is a directory", exit_code=ExitCode.USAGE) from None
    except OSError as error:
        raise MtpcError.single(f"cannot read {what} {shown}: {error.strerror or error}", exit_code=ExitCode.USAGE) from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise MtpcError.single(f"{what} {shown} is larger than {max_bytes >> 20} MiB{too_large}",
                               exit_code=ExitCode.USAGE, hint=hint)
    return raw


def existing_file(path: str | Path, what: str) -> Path:
    """`path` as a Path when it is a file; otherwise a usage error naming it as `what` ("spec")."""
    return _existing(path, what, Path.is_file, "a file")


def existing_dir(path: str | Path, what: str) -> Path:
    """`path` as a Path when it is a folder; otherwise a usage error naming it as `what` ("package")."""
    return _existing(path, what, Path.is_dir, "a directory")


def _existing(path: str | Path, what: str, is_kind, kind: str) -> Path:
    p = Path(path)
    if not p.exists():
        from .suggest import path_hint

        raise MtpcError.single(f"{what} {str(path)!r} does not exist", exit_code=ExitCode.USAGE, hint=path_hint(str(path)))
    if not is_kind(p):
        raise MtpcError.single(f"{what} {str(path)!r} is not {kind}", exit_code=ExitCode.USAGE)
    return p
