"""Write a package atomically: everything goes into a temporary sibling
directory, which replaces the destination only once every file is written.
A failure leaves the destination exactly as it was (or absent). Each file is
hashed as it is written, and `manifest.json` (every file with its size and
sha256, `mtpc.emit.manifest`) is written last, before the swap.

Only something that is safe to lose is replaced: nothing, an empty folder, or
an earlier mtpc package (recognised by its model card). Anything else needs
`force`; a file, and a folder holding the spec or the source checkpoint, are
never replaced.

An interrupted write loses nothing: a journal beside the output says what a
dead writer left, and the next write (or `mtpc check`) finishes or undoes it
(`journal`). SIGINT or SIGTERM before the swap leaves the destination as it was;
from the swap on, the signal waits for the swap, and the new package stays.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from ..util import interrupts
from ..util.diagnostics import ExitCode, MtpcError
from ..emit.artifact import Artifact
from ..emit.manifest import MANIFEST_NAME, SCHEMA as MANIFEST_SCHEMA, FileRecord, manifest_document, render as render_manifest
from ..schema.validation import errors as schema_errors
from .journal import (  # noqa: F401  (KILL_POINTS, is_package and recover are this module's API too)
    KILL_POINTS, _begin, _signals_deferred, _test_point, _Write, is_package, recover,
)

if TYPE_CHECKING:
    from ..util.progress import ByteProgress as WriteProgress


def _usage_error(message: str) -> MtpcError:
    return MtpcError.single(message, exit_code=ExitCode.USAGE)


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
    recover(out_dir)  # an interrupted earlier write decides what is at `out_dir` now
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


def _write_file(target: Path, art: Artifact, shown: str, progress: "WriteProgress | None" = None) -> FileRecord:
    """Write one artifact; its size and sha256, hashed as its bytes go by (a weights file is never read back)."""
    if progress is not None:
        progress.file_started(art.relpath)
    with _writing(shown):
        target.parent.mkdir(parents=True, exist_ok=True)
        f = open(target, "wb")
    digest, size = hashlib.sha256(), 0
    try:
        # The chunks may come straight from the source checkpoint: a failure to read them is not ours to rename.
        for chunk in art.iter_bytes():
            with _writing(shown):
                f.write(chunk)
            digest.update(chunk)
            n = chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)
            size += n
            if progress is not None:
                progress.advance(n)
    except BaseException:
        try:
            f.close()
        except OSError:
            pass  # the error already on its way says more
        raise
    with _writing(shown):
        f.close()
    return FileRecord(art.relpath, size, digest.hexdigest())


def _manifest(records: list[FileRecord]) -> Artifact:
    """manifest.json for the files written, checked against its schema like every artifact (a failure is our bug)."""
    document = manifest_document(records)
    problems = schema_errors(MANIFEST_SCHEMA, document)
    if problems:
        raise MtpcError.single(f"{MANIFEST_NAME} does not satisfy its schema: {problems[0].message}", exit_code=ExitCode.INTERNAL)
    return Artifact(MANIFEST_NAME, render_manifest(document), schema=MANIFEST_SCHEMA)


def _swap_in(write: _Write, shown: str) -> None:
    """Put the new package at `write.out`; if that fails, whatever was there is put back."""
    out, tmp = write.out, write.path("tmp")
    with _writing(shown):
        write.set_state("swapping")  # from here on, a dead writer's package is completed, not discarded
    backup = None
    if os.path.lexists(out):
        backup = write.path("old")
        with _writing(shown):
            os.rename(out, backup)
        _test_point("between-renames")
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
                    f" (the next `mtpc compile` to {shown} or `mtpc check {shown}` puts the new package in place)"
                ) from error
        write.set_state("writing")
        raise


def write_package(
    artifacts: Iterable[Artifact],
    out_dir: str | os.PathLike,
    *,
    force: bool = False,
    protected: Iterable[tuple[str, str | os.PathLike]] = (),
    progress: "WriteProgress | None" = None,
) -> tuple[FileRecord, ...]:
    """Write `artifacts` as the folder `out_dir`, then `manifest.json` listing them; see `check_destination`
    for what it may replace. Returns every file written (the manifest too) with its size and sha256.

    `progress` (a `mtpc.util.progress.ByteProgress`) hears of each file and of every chunk written."""
    shown = os.fspath(out_dir)
    check_destination(out_dir, force=force, protected=protected)
    out = Path(out_dir).resolve()
    with _writing(shown):
        out.parent.mkdir(parents=True, exist_ok=True)
    write = None
    records: list[FileRecord] = []
    interrupts.settle(f"{shown} is as it was")
    try:
        with _signals_deferred(), _writing(shown):
            write = _begin(out)
        for i, art in enumerate(artifacts):
            if art.relpath == MANIFEST_NAME:
                raise MtpcError.single(f"an emitter wrote {MANIFEST_NAME}, which the writer makes", exit_code=ExitCode.INTERNAL)
            records.append(_write_file(write.path("tmp") / art.relpath, art, shown, progress))
            interrupts.raise_if_swallowed()
            if i == 0:
                _test_point("mid-write")
        manifest = _manifest(records)
        records.append(_write_file(write.path("tmp") / MANIFEST_NAME, manifest, shown))
        _test_point("before-swap")
        interrupts.raise_if_swallowed()  # the last moment an interrupt leaves the destination as it was
    except BaseException:
        if write is not None:
            _abandon(write)
        raise
    # An interrupt from here on is answered once the swap and its cleanup are done, with the new package in place.
    with _signals_deferred():
        try:
            _swap_in(write, shown)
        except BaseException:
            if write.state == "writing":  # else the swap failed half-way and said where things are; `recover` finishes it
                _abandon(write)
            raise
        interrupts.settle(f"{shown} holds the new package, complete")
        _test_point("after-swap")
        try:
            write.discard(write.path("old"))
            write.close()
        except OSError:
            pass  # the package is in place; what is left of the earlier one goes at the next `recover`
    return tuple(sorted(records, key=lambda r: r.name))


def _abandon(write: _Write) -> None:
    with _signals_deferred():
        shutil.rmtree(write.path("tmp"), ignore_errors=True)
        try:
            write.close()
        except OSError:
            pass  # the error already on its way says more
