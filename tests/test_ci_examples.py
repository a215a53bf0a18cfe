"""The CI and editor examples in docs/ do what they say, run here as a runner would run them.

The GitHub Actions workflow's own `run:` scripts are taken from docs/ci/github-actions.yml and
run with bash in a temporary git repository laid out as a pull request: a base branch with
specs, a head commit that changes one, breaks one and adds an unrelated YAML file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mtpc.schema.validation import load_schema
from tests.fixtures.git import GIT_ENV, git

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "docs" / "ci" / "github-actions.yml"
# What `pip install` of mtpc's source reads (tests/test_pre_commit_hook.py builds from the same parts).
PACKAGE_PARTS = ("compiler", "schemas", "templates", "pyproject.toml", "README.md")


def step(name: str) -> dict:
    (job,) = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"].values()
    (found,) = [s for s in job["steps"] if s.get("name") == name]
    return found



def run_step(name: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The step's script under `bash -e` (as GitHub runs `run:`), with this venv's `mtpc` first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(
        ["bash", "-e", "-c", step(name)["run"]], cwd=cwd, capture_output=True, text=True, timeout=600,
        env={**os.environ, **GIT_ENV, "PATH": path, **env},
    )


NOHEAD = (REPO / "specs" / "qwen35-tiny-nohead.yaml").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def pull_request(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("pr") / "repo"
    (repo / "specs").mkdir(parents=True)
    (repo / "specs" / "changed.yaml").write_text(NOHEAD, encoding="utf-8")
    (repo / "specs" / "same.yaml").write_text(NOHEAD, encoding="utf-8")
    (repo / "specs" / "commented.yaml").write_text(NOHEAD, encoding="utf-8")
    (repo / "specs" / "offline.yaml").write_text(
        "mtpc: 1\nname: offline\nsource: {hf: checkpoints/not-here}\n", encoding="utf-8"
    )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")  # what actions/checkout fetches
    git(repo, "checkout", "-q", "-b", "pr")
    changed = NOHEAD.replace("    seed: 0\n", "    seed: 0\n    num_layers: 6\n")
    assert changed != NOHEAD
    (repo / "specs" / "changed.yaml").write_text(changed, encoding="utf-8")
    # A comment reworded: the spec file changes, the package it builds does not.
    commented = NOHEAD.replace("mtp:\n", "# the head follows the source\nmtp:\n", 1)
    assert commented != NOHEAD
    (repo / "specs" / "commented.yaml").write_text(commented, encoding="utf-8")
    (repo / "specs" / "openapi.yaml").write_text("openapi: 3.0.0\ninfo: {title: api, version: '1'}\n", encoding="utf-8")
    (repo / "specs" / "offline.yaml").write_text(
        "mtpc: 1\nname: offline\nsource: {hf: checkpoints/not-here}\nmtp: {head: off}\n", encoding="utf-8"
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "change a spec, add an unrelated YAML file")
    return repo


def test_the_check_step_passes_sound_specs_and_skips_other_yaml(pull_request):
    ran = run_step("Check the specs", pull_request)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.startswith("::notice file=specs/offline.yaml,line=3,")  # checked without its checkpoint
    assert "openapi" not in ran.stdout + ran.stderr.replace("1 YAML file not an mtpc spec, skipped", "")
    assert "ok (4 targets; 1 checked offline, without the checkpoint; 1 YAML file not an mtpc spec, skipped)" in ran.stderr


def test_the_check_step_annotates_a_broken_spec_at_its_line_and_fails(pull_request, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(pull_request, repo)
    broken = NOHEAD.replace("head: auto", "head: sometimes")
    (repo / "specs" / "broken.yaml").write_text(broken, encoding="utf-8")
    git(repo, "add", "-A")
    ran = run_step("Check the specs", repo)
    assert ran.returncode == 1
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "sometimes" in text)
    assert re.search(rf"^::error file=specs/broken\.yaml,line={line},col=\d+,title=mtpc check::", ran.stdout, re.M), ran.stdout


def test_the_diff_step_writes_the_changed_specs_markdown_diff_to_the_job_summary(pull_request, tmp_path):
    summary = tmp_path / "summary.md"
    ran = run_step("Diff the changed specs", pull_request, GITHUB_BASE_REF="main", GITHUB_STEP_SUMMARY=str(summary))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## mtpc: changed specs\n")
    assert "### `specs/changed.yaml`" in text and "num_hidden_layers" in text  # 4 -> 6 layers, in the package
    assert "same.yaml" not in text and "openapi" not in text  # unchanged, and not a spec
    # The base copy sits beside the new one under another name, and the texts differ in a comment: neither is a
    # change in the package it builds (provenance.json's record of the spec is left out of a spec diff).
    assert "- `specs/commented.yaml`: no change in the package it builds" in text
    assert "- `specs/offline.yaml`: not compared (" in text and "is its checkpoint on the runner?" in text
    assert git(pull_request, "status", "--porcelain") == ""  # the base copies are cleaned up


def test_the_install_step_installs_mtpc_from_the_source_the_workflow_names(tmp_path):
    """mtpc has no release to install from: the step installs the copy of its source at MTPC_SOURCE."""
    (job,) = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"].values()
    source = job["env"]["MTPC_SOURCE"]
    repo = tmp_path / "repo"
    for rel in git(REPO, "ls-files", "-z", "--", *PACKAGE_PARTS).split("\0"):
        if rel:
            (repo / source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, repo / source / rel)
    # A fresh environment, as the runner's, given none of mtpc's dependencies: what is checked is what the step
    # builds and installs from MTPC_SOURCE (`mtpc --version` needs nothing else).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    path = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    ran = subprocess.run(["bash", "-e", "-c", step("Install mtpc")["run"]], cwd=repo, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PATH": path, "MTPC_SOURCE": source, "PIP_NO_DEPS": "1",
                                           "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    version = subprocess.run([str(venv / "bin" / "mtpc"), "--version"], cwd=tmp_path, capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("mtpc "), version.stderr
    assert "OWNER" not in step("Install mtpc")["run"]


def test_the_shipped_specs_name_the_spec_schema_for_editors():
    schema = load_schema("spec")
    assert schema["$id"].startswith("urn:mtpc:schema:spec")
    for spec in sorted((REPO / "specs").glob("*.yaml")):
        first = spec.read_text(encoding="utf-8").splitlines()[0]
        match = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
        assert match, f"{spec.name}: {first!r}"
        named = (spec.parent / match.group(1)).resolve()
        assert named == REPO / "schemas" / "spec.schema.json"
        assert yaml.safe_load(named.read_text(encoding="utf-8"))["$id"] == schema["$id"]  # the schema `mtpc schema spec` prints
