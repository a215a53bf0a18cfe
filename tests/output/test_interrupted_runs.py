"""Interrupted runs lose nothing: real `python -m mtpc` processes killed (SIGKILL) at named points of the
package write, then the next `compile` or `check` of the same folder; SIGINT and SIGTERM (exit 130/143, one
line, no temporary folder); and a reader of stderr that goes away (exit 141, quietly).

The points come from `MTPC_TEST_KILL_AT` (test-only, see compiler/output/write.py). The processes of one phase run
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
    assert set(output.KILL_POINTS) == {point for point, *_ in SCENARIOS}
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
        argv = ["compile", "-q", str(NEW_SPEC), "-o", "pkg"] if verb == "compile" else ["check", "pkg"]
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


def test_sigint_and_sigterm_while_writing_exit_130_143_and_leave_no_temporary_folder(tmp_path, packages):
    cases = [("mid-write:SIGINT", 130, "old"), ("mid-write:SIGTERM", 143, "old"), ("between-renames:SIGTERM", 143, "new")]
    dirs = [tmp_path / str(i) for i in range(len(cases))]
    for d in dirs:
        shutil.copytree(packages["old"], d / "pkg")
    results = finish([start(d, "compile", "-q", str(NEW_SPEC), "-o", "pkg", kill_at=kill_at) for d, (kill_at, *_) in zip(dirs, cases)])
    for (kill_at, code, holds), d, got in zip(cases, dirs, results):
        assert got == (code, f"mtpc: interrupted by {kill_at.partition(':')[2]}\n"), kill_at
        assert os.listdir(d) == ["pkg"], kill_at
        # Mid-swap the signal waits for the swap to end: the folder then holds the whole new package.
        assert tree(d / "pkg") == tree(packages[holds]), kill_at


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
