"""The journal that makes a package write recoverable, and the recovery of an interrupted one.

Each write keeps a journal beside the output, `.<name>.mtpc-<token>.writing` (then `.swapping`
once every file is written), that records the process (pid, host, start time) doing it; its
folders are siblings with the same token: `.tmp` (the new package), `.old` (the earlier one during
the swap) and `.trash` (an `.old` being deleted). A later write to the same output, or `mtpc check`
of it, finishes what a dead writer left (`recover`): a `.writing` journal means the new package was
incomplete, so its folder is removed and the output is as it was; a `.swapping` journal means the
new package was complete, so the swap is completed. Only folders named by a journal whose process
is gone are touched. `mtpc.output.write` writes through it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..emit.model_card import CARD_NAME, CARD_SIGNATURE
from ..util.interrupts import KILL_POINTS, test_point  # noqa: F401  (KILL_POINTS: this module's API too)

# The signature sits near the top of the card; reading more of an arbitrary README.md would only cost time.
_CARD_HEAD_BYTES = 4096


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


# Test-only kill points (MTPC_TEST_KILL_AT, see mtpc.util.interrupts): the write's are "mid-write", "before-swap",
# "between-renames", "after-swap" and "mid-discard".
_test_point = test_point


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block is done, then deliver them to the handlers they had.

    A step that must not be cut in two (the swap, the cleanup after an interrupt) runs inside this;
    only SIGKILL can still stop it there, and `recover` handles that."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, lambda s, frame: caught.append(s))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(caught):
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of a process, where /proc tells."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return fields[0].decode(), fields[19].decode()
    except (OSError, IndexError):
        return None


def _owner() -> dict:
    stat = _proc_stat(os.getpid())
    return {"mtpc_write": 1, "pid": os.getpid(), "host": socket.gethostname(), "start": stat and stat[1]}


def _owner_alive(doc: dict) -> bool:
    """False only when we can tell the writer is gone: same host, and no such process (or another one now)."""
    pid = doc.get("pid")
    if doc.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # EPERM: someone else's live process
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, start = stat
    return state != "Z" and (doc.get("start") is None or start == doc.get("start"))


_JOURNAL = re.compile(r"mtpc-(?P<token>[0-9a-f]{8})\.(?P<state>writing|swapping)")
# What mtpc before the journal left when killed: the earlier package mid-swap, and the new one's folder.
_LEGACY_OLD = re.compile(r"old-[0-9a-f]{8}")
_LEGACY_TMP = re.compile(r"tmp-[0-9a-f]{8}")
# A journal file is created empty and filled at once; one left empty (a SIGKILL in that instant) is
# removed once it is this old, when no writer can still be about to fill it.
_EMPTY_JOURNAL_AGE = 60.0


class _Write:
    """One write to `out`: the journal and the folders that share its token."""

    def __init__(self, out: Path, token: str, state: str = "writing"):
        self.out, self.token, self.state = out, token, state

    def path(self, suffix: str) -> Path:
        return self.out.parent / f".{self.out.name}.mtpc-{self.token}.{suffix}"

    @property
    def journal(self) -> Path:
        return self.path(self.state)

    def set_state(self, state: str) -> None:
        os.rename(self.journal, self.path(state))
        self.state = state

    def discard(self, folder: Path) -> None:
        """Delete one of our folders. An `.old` goes to `.trash` first: a half-deleted package must never look whole."""
        trash = self.path("trash")
        shutil.rmtree(trash, ignore_errors=True)
        if not os.path.lexists(folder):
            return
        if folder != self.path("tmp"):
            os.rename(folder, trash)
            folder = trash
            _test_point("mid-discard")
        shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.path("trash"), ignore_errors=True)
        os.unlink(self.journal)


def _begin(out: Path) -> _Write:
    # Not tempfile.mkdtemp: that makes the folder 0700, and the folder becomes the package, which
    # should get the umask's permissions like every folder inside it.
    while True:
        write = _Write(out, secrets.token_hex(4))
        try:
            fd = os.open(write.journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(_owner(), f)
        try:
            write.path("tmp").mkdir()
            return write
        except FileExistsError:  # not ours (no journal named it): leave it, take another token
            os.unlink(write.journal)


def _note(message: str) -> None:
    from ..util.progress import note

    note(message)  # on stderr, unless the verb runs with -q


def recover(out_dir: str | os.PathLike, note=_note) -> None:
    """Finish what an interrupted write to `out_dir` left behind (see the module's docstring); say what was done.

    Only writes whose process is gone are touched; a step that fails is left for a later run."""
    out = Path(out_dir).resolve()
    shown = os.fspath(out_dir)
    prefix = f".{out.name}."
    try:
        names = sorted(n for n in os.listdir(out.parent) if n.startswith(prefix))
    except OSError:
        return
    for name in names:
        m = _JOURNAL.fullmatch(name[len(prefix):])
        if m is None:
            continue
        journal = out.parent / name
        try:
            try:
                with open(journal, "rb") as f:
                    text = f.read(4096)
            except FileNotFoundError:  # its writer, alive, just finished
                continue
            if not text:
                if time.time() - os.stat(journal).st_mtime > _EMPTY_JOURNAL_AGE:
                    os.unlink(journal)
                continue
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("mtpc_write") != 1 or _owner_alive(doc):
                continue
            with _signals_deferred():
                _finish(_Write(out, m["token"], m["state"]), shown, note)
        except (OSError, ValueError) as error:
            note(f"could not finish an interrupted write to {shown} ({journal.name}): {error}")
    if not os.path.lexists(out):
        legacy = [n for n in names if _LEGACY_OLD.fullmatch(n[len(prefix):]) and is_package(out.parent / n)]
        if len(legacy) == 1:
            try:
                with _signals_deferred():
                    os.rename(out.parent / legacy[0], out)
            except OSError as error:
                note(f"could not restore the earlier package at {shown} from {legacy[0]}: {error}")
            else:
                note(f"restored the earlier package at {shown} from {legacy[0]}, left by an interrupted compile")
    for name in names:  # no journal says whose they are, so they are only pointed at
        if _LEGACY_TMP.fullmatch(name[len(prefix):]):
            note(f"{out.parent / name} looks like the folder of a compile an older mtpc did not finish; "
                 "delete it if no mtpc is running")


def _finish(write: _Write, shown: str, note) -> None:
    tmp, old = write.path("tmp"), write.path("old")
    out = write.out
    if write.state == "writing":  # the new package was incomplete: the output is as it was
        if os.path.lexists(tmp):
            write.discard(tmp)
            note(f"removed the incomplete package of an interrupted compile of {shown}; {shown} is as it was")
    elif os.path.lexists(tmp):  # swapping: the new package was complete, put it in place
        if os.path.lexists(out) and not os.path.lexists(old):
            os.rename(out, old)
        if os.path.lexists(out):
            note(f"an interrupted compile of {shown} left its new package in {tmp.name} and the earlier one "
                 f"in {old.name}, but {shown} exists again: leaving all three as they are")
            return
        os.rename(tmp, out)
        write.discard(old)
        note(f"completed the interrupted replacement of {shown}: it now holds the new package")
    elif os.path.lexists(out):  # the swap was done; only the earlier package was still to delete
        if os.path.lexists(old) or os.path.lexists(write.path("trash")):
            write.discard(old)
            note(f"removed the earlier package an interrupted compile of {shown} had replaced; {shown} holds the new one")
    elif os.path.lexists(old):  # the new package is gone (not by us): the earlier one is all there is
        os.rename(old, out)
        note(f"restored the earlier package at {shown}, left aside by an interrupted compile")
    write.close()
