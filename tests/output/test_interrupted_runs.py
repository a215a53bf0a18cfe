"""Interrupted runs lose nothing: real `python -m mtpc` processes killed (SIGKILL) at named points of the
package write, then the next `compile` or `check` of the same folder; SIGINT and SIGTERM at every point of a
compile, from the first line of mtpc's code to its last (exit 130/143, one line that says what the folder holds,
no temporary folder), delivered plainly or from inside a weakref callback, where Python swallows what a signal
handler raises (as when Ctrl-C lands in an import); and a reader of stderr that goes away (exit 141, quietly).

The points come from `MTPC_TEST_KILL_AT` (test-only, see mtpc.util.interrupts). The processes of one phase run
side by side, so the whole file takes a few seconds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mtpc.output import write as output
from mtpc.cli.main import main

SPECS = Path(__file__).resolve().parents[2] / "specs"
NEW_SPEC = SPECS / "qwen35-tiny-mtp.yaml"  # what the interrupted compile writes
OLD_SPEC = SPECS / "qwen35-tiny-nohead.yaml"  # the earlier package it replaces (no mtp/ folder: told apart at a glance)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def start(cwd: Path, *args: str, kill_at: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "MTPC_TEST_KILL_AT"}
    if kill_at:
        env["MTPC_TEST_KILL_AT"] = kill_at
    return subprocess.Popen(
        [sys.executable, "-m", "mtpc", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    errs = [p.communicate(timeout=120)[1] for p in procs]
    return [(p.returncode, err) for p, err in zip(procs, errs)]


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    """The earlier and the new package, each compiled once, in-process."""
    root = tmp_path_factory.mktemp("ref")
    for name, spec in (("old", OLD_SPEC), ("new", NEW_SPEC)):
        assert main(["compile", "-q", str(spec), "-o", str(root / name)]) == 0
    return {"old": root / "old", "new": root / "new"}


# (kill point, whether an earlier package was there, the verb run next, what the folder holds afterwards,
# the note that says so)
SCENARIOS = [
    ("mid-write", True, "compile", "new", "removed the incomplete package of an interrupted compile of pkg; pkg is as it was"),
    ("before-swap", True, "check", "old", "removed the incomplete package of an interrupted compile of pkg; pkg is as it was"),
    ("between-renames", True, "check", "new", "completed the interrupted replacement of pkg: it now holds the new package"),
    ("after-swap", True, "check", "new", "removed the earlier package an interrupted compile of pkg had replaced; pkg holds the new one"),
    ("mid-discard", True, "compile", "new", "removed the earlier package an interrupted compile of pkg had replaced; pkg holds the new one"),
]


def test_sigkill_at_any_point_then_compile_or_check_leaves_one_whole_package(tmp_path, packages, capsys, monkeypatch):
    assert set(output.KILL_POINTS) >= {point for point, *_ in SCENARIOS}
    dirs = []
    for i, (point, earlier, *_) in enumerate(SCENARIOS):
        d = tmp_path / f"{i}-{point}"
        d.mkdir()
        if earlier:
            shutil.copytree(packages["old"], d / "pkg")
        dirs.append(d)
    # The compiles are real processes, killed side by side; what follows runs in-process (the same `main`), which
    # saves a second of imports each.
    killed = finish([start(d, "compile", "-q", str(NEW_SPEC), "-o", "pkg", kill_at=point) for d, (point, *_) in zip(dirs, SCENARIOS)])
    for (point, *_), d, (code, _err) in zip(SCENARIOS, dirs, killed):
        assert code == -signal.SIGKILL, point
        assert len(os.listdir(d)) > 1, f"{point}: the kill left nothing to recover"
    capsys.readouterr()
    for (point, earlier, verb, holds, note), d in zip(SCENARIOS, dirs):
        where = f"{point}{'' if earlier else ' of a first compile'}, then {verb}"
        monkeypatch.chdir(d)
        argv = ["compile", str(NEW_SPEC), "-o", "pkg"] if verb == "compile" else ["check", "pkg"]  # the note: not with -q
        assert main(argv) == 0, where
        err = capsys.readouterr().err
        assert err.splitlines()[0] == f"mtpc: note: {note}", where
        assert os.listdir(d) == ["pkg"], where  # no temporary folder, no journal, no earlier package left aside
        assert tree(d / "pkg") == tree(packages[holds]), where


def test_check_of_a_first_compile_killed_removes_what_it_left(tmp_path, capsys, monkeypatch):
    assert finish([start(tmp_path, "compile", "-q", str(NEW_SPEC), "-o", "pkg", kill_at="mid-write")])[0][0] == -9
    assert len(os.listdir(tmp_path)) == 2  # the incomplete new package and its journal
    monkeypatch.chdir(tmp_path)
    assert main(["check", "pkg"]) == 2
    assert capsys.readouterr().err.splitlines()[:2] == [
        "mtpc: note: removed the incomplete package of an interrupted compile of pkg; pkg is as it was",
        "error: 'pkg' does not exist",
    ]
    assert os.listdir(tmp_path) == []


AS_IT_WAS = " (pkg is as it was)"
COMPLETE = " (pkg holds the new package, complete)"
# (where, what stderr's one line adds, what pkg holds afterwards: "old" as it was, "new" the new package whole).
# Before the swap the folder is as it was; from the swap on the signal waits for it, and the new package stays.
WINDOWS = [
    ("startup", "", "old"),  # handlers in place, the verbs (onnx, numpy) still to import
    ("mid-write", AS_IT_WAS, "old"),
    ("before-swap", AS_IT_WAS, "old"),
    ("between-renames", COMPLETE, "new"),
    ("after-swap", COMPLETE, "new"),
    ("mid-discard", COMPLETE, "new"),
    ("reporting", COMPLETE, "new"),  # the package in place, compile printing what it wrote
]


@pytest.mark.parametrize("how", ["", ":finalizer"], ids=["plain", "swallowed"])
def test_sigint_and_sigterm_anywhere_in_a_compile_end_it_one_way(tmp_path, packages, how):
    """Every window, both signals, delivered plainly or where Python swallows the handler's exception (the case
    that made a Ctrl-C in an import or in the last fraction of a second be lost, or end the run with a traceback
    and exit 0): exit 130 or 143, one line saying what the folder holds, which is the old or the whole new package,
    and no temporary folder or journal left beside it."""
    assert set(output.KILL_POINTS) == {point for point, *_ in WINDOWS} | {"exiting"}
    if how:  # swallowed: where the run must notice it (the imports, each file, the swap, the end)
        cases = [(point, "SIGINT", says, holds) for point, says, holds in WINDOWS
                 if point in ("startup", "mid-write", "before-swap", "reporting")]
    else:  # SIGTERM takes SIGINT's path: a few windows of it are enough
        cases = [(point, "SIGINT", says, holds) for point, says, holds in WINDOWS]
        cases += [(point, "SIGTERM", says, holds) for point, says, holds in WINDOWS if point in ("startup", "before-swap", "after-swap")]
    dirs = [tmp_path / f"{point}-{signame}" for point, signame, *_ in cases]
    for d in dirs:
        shutil.copytree(packages["old"], d / "pkg")
    results = finish([start(d, "compile", "-q", str(NEW_SPEC), "-o", "pkg", kill_at=f"{point}:{signame}{how}")
                      for d, (point, signame, *_) in zip(dirs, cases)])
    for (point, signame, says, holds), d, got in zip(cases, dirs, results):
        where = f"{point}:{signame}{how}"
        assert got == (128 + getattr(signal, signame), f"mtpc: interrupted by {signame}{says}\n"), where
        assert os.listdir(d) == ["pkg"], where
        assert tree(d / "pkg") == tree(packages[holds]), where


def test_a_signal_after_the_run_has_decided_how_it_exits_changes_nothing(tmp_path, packages):
    """The last instant: its output written and its exit code decided, the command leaves without an interpreter
    shutdown, so a signal then is not delivered (no kill without a message, no traceback)."""
    ways = {"plain": "", "swallowed": ":finalizer"}
    for name in ways:
        (tmp_path / name).mkdir()
    results = finish([start(tmp_path / name, "compile", "-q", str(NEW_SPEC), "-o", "pkg", kill_at=f"exiting:SIGINT{how}")
                      for name, how in ways.items()])
    assert results == [(0, "")] * 2
    for name in ways:
        assert tree(tmp_path / name / "pkg") == tree(packages["new"])


def _catches_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the signal mask from /proc")
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_starting_up_is_one_line_too(tmp_path, signum, code):
    """The verbs import onnx and numpy (most of a second); the handlers are in place before that starts."""
    proc = start(tmp_path, "compile", str(NEW_SPEC), "-o", "pkg")
    deadline = time.monotonic() + 30
    while not _catches_sigterm(proc.pid):  # Python leaves SIGTERM alone: caught means mtpc's handlers are in
        assert time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signum)
    got, err = finish([proc])[0]
    assert (got, err.splitlines()) == (code, [f"mtpc: interrupted by {signal.Signals(signum).name}"])
    assert os.listdir(tmp_path) == []


def test_a_closed_stderr_exits_141_quietly(tmp_path):
    """`mtpc compile missing.yaml 2>&1 | head -0`: the error has nowhere to go; exit as for SIGPIPE, not 1."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mtpc", "compile", "missing.yaml"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stderr.close()
    assert proc.stdout.read() == b""
    assert proc.wait(timeout=120) == 141
