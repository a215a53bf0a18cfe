"""Write a package atomically: everything goes into a temporary sibling
directory, which replaces the destination only once every file is written.
A failure leaves the destination exactly as it was (or absent).

Only something that is safe to lose is replaced: nothing, an empty folder, or
an earlier mtpc package (recognised by its model card). Anything else needs
`force`; a file, and a folder holding the spec or the source checkpoint, are
never replaced.
"""

from __future__ import annotations

import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from .diagnostics import ExitCode, MtpcError
from .emit import Artifact
from .emit.model_card import CARD_NAME, CARD_SIGNATURE

# The signature sits near the top of the card; reading more of an arbitrary README.md would only cost time.
_CARD_HEAD_BYTES = 4096


def _usage_error(message: str) -> MtpcError:
    return MtpcError.single(message, exit_code=ExitCode.USAGE)


def is_package(folder: Path) -> bool:
    card = folder / CARD_NAME
    if not card.is_file():
        return False
    try:
        with open(card, "rb") as f:
            head = f.read(_CARD_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    return any(line.startswith(CARD_SIGNATURE) for line in head.splitlines())


def _holds(folder: Path, path: Path) -> bool:
    return path == folder or folder in path.parents


def check_destination(
    out_dir: str | os.PathLike, *, force: bool = False, protected: Iterable[tuple[str, str | os.PathLike]] = ()
) -> None:
    """Raise unless `out_dir` may be replaced. `protected` pairs a description with a path that must survive."""
    shown = os.fspath(out_dir)
    out = Path(out_dir).resolve()
    for what, path in protected:
        if _holds(out, Path(path).resolve()):
            raise _usage_error(f"{shown} holds the {what} {os.fspath(path)}; refusing to replace it (choose another -o)")
    if not os.path.lexists(out):
        return
    if not out.is_dir():
        raise _usage_error(f"{shown} exists and is not a directory; refusing to replace it (choose another -o)")
    if force or is_package(out) or not any(out.iterdir()):
        return
    raise _usage_error(f"{shown} exists and is not an mtpc package; refusing to replace it (choose another -o, or --force)")


@contextmanager
def _writing(shown: str) -> Iterator[None]:
    """Report a failed write as the user's output folder, never as our temporary sibling of it."""
    try:
        yield
    except OSError as error:
        raise _usage_error(f"cannot write output directory {shown}: {error.strerror or error}") from error


def _make_temp_dir(out: Path) -> Path:
    # Not tempfile.mkdtemp: that makes the folder 0700, and the folder becomes the package, which
    # should get the umask's permissions like every folder inside it.
    while True:
        tmp = out.parent / f".{out.name}.tmp-{secrets.token_hex(4)}"
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue


def _write_file(target: Path, art: Artifact, shown: str) -> None:
    with _writing(shown):
        target.parent.mkdir(parents=True, exist_ok=True)
        f = open(target, "wb")
    try:
        # The chunks may come straight from the source checkpoint: a failure to read them is not ours to rename.
        for chunk in art.iter_bytes():
            with _writing(shown):
                f.write(chunk)
    except BaseException:
        try:
            f.close()
        except OSError:
            pass  # the error already on its way says more
        raise
    with _writing(shown):
        f.close()


def _swap_in(tmp: Path, out: Path, shown: str) -> None:
    """Put `tmp` at `out`; if that fails, whatever was at `out` is put back."""
    backup = None
    if os.path.lexists(out):
        backup = out.parent / f".{out.name}.old-{secrets.token_hex(4)}"
        with _writing(shown):
            os.rename(out, backup)
    try:
        with _writing(shown):
            os.rename(tmp, out)
    except BaseException:
        if backup is not None:
            try:
                os.rename(backup, out)
            except OSError as error:
                raise _usage_error(
                    f"cannot write output directory {shown}, nor put its old content back: it is in {backup}"
                ) from error
        raise
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


def write_package(
    artifacts: Iterable[Artifact],
    out_dir: str | os.PathLike,
    *,
    force: bool = False,
    protected: Iterable[tuple[str, str | os.PathLike]] = (),
) -> None:
    """Write `artifacts` as the folder `out_dir`; see `check_destination` for what it may replace."""
    shown = os.fspath(out_dir)
    check_destination(out_dir, force=force, protected=protected)
    out = Path(out_dir).resolve()
    with _writing(shown):
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = _make_temp_dir(out)
    try:
        for art in artifacts:
            _write_file(tmp / art.relpath, art, shown)
        _swap_in(tmp, out, shown)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
