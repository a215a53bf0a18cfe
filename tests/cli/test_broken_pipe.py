"""A reader that goes away before mtpc has written all it prints (`mtpc diff a b | head -c 10`): exit 141, as a
process killed by SIGPIPE, with nothing on stderr, for every verb and every format; never 0 or 1, which a script
would read as a verdict. Output that fits in the pipe and is written before the reader leaves was delivered: the
verb's own exit code stands, as for any Unix tool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtpc.cli.main import main

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "specs" / "qwen35-tiny-mtp.yaml"
MOE = REPO / "specs" / "qwen35moe-tiny-mtp.yaml"


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipe")
    for name, spec in (("tiny", TINY), ("moe", MOE)):
        assert main(["compile", "-q", str(spec), "-o", str(root / name)]) == 0
    return root


# Every verb in every format it takes, on something it answers at length.
RUNS = {
    "compile": ["compile", str(TINY), "-o", "{root}/again"],
    "plan": ["plan", str(MOE), "--against", "{root}/tiny"],
    "check": ["check", "{root}/tiny", str(REPO / "tests" / "cases" / "invalid" / "multiple_errors.yaml")],
    "diff": ["diff", "{root}/tiny", "{root}/moe"],
    "inspect": ["inspect", str(REPO / "tests" / "cases")],  # not a checkpoint: its error is what is printed
    "schema": ["schema", "spec"],
    "verify": ["verify", "--static-only", "{root}/tiny", "--spec", str(TINY)],
    "tune": ["tune", "{root}/tiny", "--new-tokens", "8", "--sweeps", "3", "--max-draft", "1"],
}
FORMATS = {"compile": ("text", "json"), "plan": ("text", "json", "markdown"), "check": ("text", "json", "github"),
           "diff": ("text", "json", "markdown"), "inspect": ("text", "json"), "schema": ("text", "json"),
           "verify": ("text", "json"), "tune": ("text", "json")}


def test_a_reader_gone_before_anything_is_written_is_141_for_every_verb_and_format(packages):
    from mtpc.cli.main import VERB_MODULES

    assert {m.removesuffix("_cmd") for m in VERB_MODULES} == set(RUNS)  # every verb
    procs = {}
    for verb, argv in RUNS.items():
        for fmt in FORMATS[verb]:
            read, write = os.pipe()
            os.close(read)  # gone before mtpc (still importing) prints anything
            procs[verb, fmt] = subprocess.Popen(
                [sys.executable, "-m", "mtpc", *[a.format(root=packages) for a in argv], "--format", fmt, "-q"],
                stdout=write, stderr=subprocess.PIPE, text=True, cwd=packages,
            )
            os.close(write)
    for (verb, fmt), proc in procs.items():
        _, err = proc.communicate(timeout=600)
        code = proc.returncode
        if verb == "inspect" and fmt == "text":
            assert code == 2, err  # an error only, on stderr: stdout is never written
            continue
        assert (code, err) == (141, ""), (verb, fmt)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_reader_gone_after_a_few_bytes_of_a_long_output_is_141(packages, fmt):
    """The long output is more than a pipe holds, so mtpc is still writing when `head -c 10` leaves."""
    argv = ["diff", str(packages / "tiny"), str(packages / "moe"), "--format", fmt]
    if fmt == "text":  # one long line instead: the case the text layer lost
        argv = ["-c", "from mtpc.cli.report import out; out('x' * 200_000)"]
    else:
        argv = ["-m", "mtpc", *argv]
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=packages)
    assert len(proc.stdout.read(10)) == 10
    proc.stdout.close()
    err = proc.stderr.read()
    code = proc.wait(timeout=600)
    if fmt == "text":
        assert b"BrokenPipeError" in err  # no `main` around a bare `out`: the error is raised, not dropped
    else:
        assert (code, err) == (141, b"")
