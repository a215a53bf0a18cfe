"""The runtime tests against every supported onnxruntime-genai release, not only the installed one.

tests/runtime, tests/profiles and GLM-4.5's Hugging Face decoding tests compile their packages for the installed release and hold it to
its profile (tests/fixtures/ort_release.py). Here they run again, in a subprocess, for each other
release mtpc has a profile of, with that release's wheel first on PYTHONPATH (installed once into
the test cache, on this environment's onnxruntime). Outside CI a release pip cannot fetch is a
skip that says so; in CI it fails, so CI never passes with one release untested.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtpc.profiles import ort_genai_profiles
from tests.fixtures.ort_release import INSTALLED, ReleaseUnavailable, overlay
from tests.fixtures.shared import HOW_TO_GET_IT, SHARED, in_ci

REPO = Path(__file__).resolve().parents[1]
# GLM-4.5's decoding tests too: its packages name the `llama` model type, which each release must drive.
RUNTIME_TESTS = ("tests/runtime", "tests/profiles", "tests/glm4moe/test_glm4moe_hf.py", "tests/conformance/test_transformers.py")
# Files there that never load onnxruntime-genai (CLI errors on broken GGUFs, profile tables side by side).
RELEASE_NEUTRAL = ("tests/runtime/test_cli_errors.py", "tests/profiles/test_profiles.py")
OTHER_RELEASES = [p.version for p in ort_genai_profiles() if p.version != INSTALLED]


def test_the_installed_release_is_one_mtpc_supports():
    assert INSTALLED in {p.version for p in ort_genai_profiles()}
    assert OTHER_RELEASES, "a second supported release to run the runtime tests against"
    assert all((REPO / path).is_file() for path in RELEASE_NEUTRAL)  # --ignore passes over a missing path silently


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_the_runtime_tests_pass_against(release, tmp_path):
    try:
        folder = overlay(release)
    except ReleaseUnavailable as exc:
        if in_ci():
            pytest.fail(f"{exc}\n(CI is set, so this fails instead of skipping)", pytrace=False)
        pytest.skip(f"onnxruntime-genai {release} is not installable here, so the runtime tests ran against "
                    f"{INSTALLED} only: {exc}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    probe = subprocess.run([sys.executable, "-c", "import onnxruntime_genai as og; print(og.__version__)"],
                           env=env, capture_output=True, text=True, cwd=REPO)
    assert probe.stdout.strip() == release, probe.stderr[-2000:]
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-x", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
               *RUNTIME_TESTS, *(f"--ignore={path}" for path in RELEASE_NEUTRAL)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, f"onnxruntime-genai {release}: {summary}\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    assert " passed" in summary, summary
    assert not unexplained_skips(run.stdout), run.stdout[-6000:]


def unexplained_skips(report: str) -> list[str]:
    """The skips of a `pytest -rs` report but those for an absent shared folder outside CI, which this run
    has too (in CI the folder is there, or those tests fail): a release must not skip what the installed one runs."""
    skips = [line for line in report.splitlines() if line.startswith("SKIPPED ")]
    if in_ci() or SHARED.is_dir():
        return skips
    return [line for line in skips if HOW_TO_GET_IT not in line]


def test_only_an_absent_shared_folder_outside_ci_explains_a_skip(monkeypatch, tmp_path):
    import tests.test_runtime_releases as here

    report = "\n".join([
        f"SKIPPED [3] tests/runtime/test_x.py:10: {tmp_path} is missing: {HOW_TO_GET_IT}",
        "SKIPPED [1] tests/runtime/test_y.py:20: onnxruntime-genai cannot run this here",
        "1 passed, 4 skipped",
    ])
    monkeypatch.setattr(here, "SHARED", tmp_path / "absent")
    monkeypatch.delenv("CI", raising=False)
    assert [line.split(":")[0] for line in unexplained_skips(report)] == ["SKIPPED [1] tests/runtime/test_y.py"]
    monkeypatch.setenv("CI", "true")
    assert len(unexplained_skips(report)) == 2
    monkeypatch.delenv("CI")
    monkeypatch.setattr(here, "SHARED", tmp_path)  # the folder is there: every skip needs explaining
    assert len(unexplained_skips(report)) == 2
