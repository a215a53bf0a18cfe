"""The Python and shell examples of README.md and docs/*.md run as written, from a folder holding a copy of `specs/`
(what a user has after cloning), so an example cannot name a file it never made. The module docstring of
`mtpc.api.compiling` carries docs/api.md's example too. (YAML examples: tests/spec/test_doc_examples.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent


def blocks(language: str) -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        found += [(f"{doc.name}#{i}", block) for i, block in
                  enumerate(re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M))]
    return found


def clone_of_the_docs_folder(tmp_path: Path) -> Path:
    work = tmp_path / "checkout"
    shutil.copytree(REPO / "specs", work / "specs")
    shutil.copytree(REPO / "schemas", work / "schemas")  # the specs' editor line names ../schemas
    return work


PYTHON = blocks("python")


def test_the_docs_have_python_examples():
    assert {name.split("#")[0] for name, _ in PYTHON} >= {"api.md", "diff.md"}


@pytest.mark.parametrize("name, code", PYTHON, ids=[n for n, _ in PYTHON])
def test_each_python_example_runs_as_written(tmp_path, name, code):
    work = clone_of_the_docs_folder(tmp_path)
    ran = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, f"{name}:\n{ran.stderr}"
    assert ran.stdout.strip(), name  # it prints what it says it prints


def test_the_api_docstring_example_is_the_api_pages():
    from mtpc.api import compiling

    readme = dict(PYTHON)["api.md#0"]
    for line in ('mtpc.compile("specs/qwen35-tiny-nohead.yaml", "out/nohead")', 'mtpc.diff("out/tiny", "out/nohead")'):
        assert line in readme and line in compiling.__doc__


def test_the_readmes_set_up_commands_run_after_the_install(tmp_path):
    """`python3 -m venv .venv && .venv/bin/pip install ... && .venv/bin/mtpc compile ... && .venv/bin/mtpc verify ...`:
    the install is this environment; each mtpc command after it runs as written, and verify ends in `verify: ok`
    with at least half of the default head's drafts accepted."""
    (setup,) = [b for n, b in blocks("sh") if n.startswith("README.md") and "mtpc verify" in b]
    commands = [c.strip() for c in setup.strip().split("&&")]
    assert commands[0].startswith("python3 -m venv .venv") and ".venv/bin/pip install" in commands[1]
    mtpc_commands = commands[2:]
    assert mtpc_commands and all(c.startswith(".venv/bin/mtpc ") for c in mtpc_commands)
    work = clone_of_the_docs_folder(tmp_path)
    for command in mtpc_commands:
        argv = command.split()
        argv[0] = str(BIN / "mtpc")
        ran = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=900,
                             env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
        assert ran.returncode == 0, f"{command}:\n{ran.stdout}\n{ran.stderr}"
        if " verify " in f" {command} ":
            # The first run shows what MTP is for: a head whose drafts the main model accepts.
            last = ran.stdout.strip().splitlines()
            assert last[-1] == "verify: ok", ran.stdout
            (acceptance,) = [line for line in last if line.startswith("draft acceptance:")]
            percent = int(re.search(r"(\d+)%", acceptance).group(1))
            assert percent >= 50, ran.stdout


def test_ci_runs_the_readmes_test_command():
    """`.ci/run` ends in the README's test command, character for character, so CI tests what a newcomer runs."""
    (test_command,) = [b.strip() for n, b in blocks("sh") if n.startswith("README.md") and "-m pytest" in b]
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert ci_lines[-1] == test_command
