"""Tests that need the shared reference folder: run with it, skip without it outside CI, fail without it in CI.

The behaviour without the folder is seen from outside: a pytest subprocess runs the one test
below that reads a shared file, with `MTPC_SHARED` pointing at a folder that does not exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.shared import SHARED, shared_file

REPO = Path(__file__).resolve().parents[1]
READS_A_SHARED_FILE = "tests/test_shared_files.py::test_a_conformance_schema_is_read_from_the_shared_folder"


def test_a_conformance_schema_is_read_from_the_shared_folder():
    schema = json.loads(shared_file("conformance/onnx-genai/flat-layout.schema.json").read_text(encoding="utf-8"))
    assert schema["$schema"].startswith("https://json-schema.org/")


def test_a_file_missing_from_a_present_shared_folder_fails_the_test():
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: the subprocess tests below cover that")
    with pytest.raises(pytest.fail.Exception, match="is missing from the shared folder"):
        shared_file("conformance/no-such-schema.json")


def run_without_shared(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["MTPC_SHARED"] = str(tmp_path / "no-shared-here")
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", READS_A_SHARED_FILE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize("ci", [None, "false"])
def test_without_the_shared_folder_outside_ci_the_test_skips_naming_the_folder(tmp_path, ci):
    ran = run_without_shared(tmp_path, ci)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 skipped" in ran.stdout
    assert "SKIPPED [1] " in ran.stdout  # -ra (the project's addopts) names every skip this way in a full run
    assert f"{tmp_path / 'no-shared-here'} is missing" in ran.stdout
    assert "copy the project's shared/ folder beside the checkout as ../shared, or point MTPC_SHARED at a copy" in ran.stdout


@pytest.mark.parametrize("ci", ["true"])
def test_without_the_shared_folder_in_ci_the_test_fails(tmp_path, ci):
    ran = run_without_shared(tmp_path, ci)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "1 failed" in ran.stdout
    assert f"{tmp_path / 'no-shared-here'} is missing" in ran.stdout and "CI is set" in ran.stdout
