"""The pre-commit hook, through the real `pre-commit` tool: it checks the mtpc specs a commit touches, no other YAML.

Two forms, as docs/ci.md gives them. The one that works today is a `repo: local` hook running
the `mtpc` installed beside pre-commit: the snippet is taken from README.md and docs/ci.md as
written. Once mtpc tags releases, a consumer repository refers to this one by a release tag; the
test makes that tag itself (named after pyproject's version, as releases are), in a copy of this
checkout committed to a throwaway git repository, since the project's own tags are the
integrator's. Each form runs `pre-commit run` in a temporary repository holding a sound spec, an
unrelated OpenAPI file and a broken spec.

pre-commit builds the hook's virtualenv (pip install of this package, from the package
index pip is set up with) once per content of the checkout and keeps it under the test
cache (`$MTPC_TEST_CACHE`, default ~/.cache/mtpc-tests), so a rerun of unchanged code reuses it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from mtpc.api.checking import is_spec_file
from tests.clients.llama_cpp import cache_root
from tests.fixtures.git import GIT_ENV, git

REPO = Path(__file__).resolve().parents[1]
VERSION = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
TAG = f"v{VERSION}"  # what a release of this version is tagged (docs/ci.md)



# What the hook's environment is built from (pip install of the package); tests and docs are not part of it.
PACKAGE_PARTS = ("compiler/", "schemas/", "templates/", "pyproject.toml", "README.md", ".pre-commit-hooks.yaml")


def hook_repository() -> Path:
    """This checkout's package files (committed or not, as the tests see them) in a git repository tagged TAG.

    Its path names the files' digest, so pre-commit (which keys its environments by repository
    and rev) builds a new hook environment exactly when the package changed; the previous one is
    removed then, so the cache holds one.
    """
    listed = git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    files = sorted(p for p in listed if p.startswith(PACKAGE_PARTS) and (REPO / p).is_file())
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0" + (REPO / rel).read_bytes() + b"\0")
    root = cache_root() / "pre-commit"
    repo = root / f"hook-repo-{digest.hexdigest()[:16]}"
    if (repo / ".git").is_dir():
        return repo
    shutil.rmtree(root, ignore_errors=True)  # an older package's repository and hook environment
    building = root / f"{repo.name}.partial-{os.getpid()}"
    for rel in files:
        (building / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, building / rel)
    git(building, "init", "-q")
    git(building, "add", "-A")
    git(building, "commit", "-q", "-m", "mtpc, as the tests see it")
    git(building, "tag", "-a", TAG, "-m", f"mtpc {TAG}")
    building.rename(repo)
    return repo


GOOD_SPEC = (REPO / "specs" / "qwen35-tiny-nohead.yaml").read_text(encoding="utf-8")
OPENAPI = """\
openapi: 3.0.0
info: {title: not a spec, version: "1"}
paths:
  /models:
    get: {responses: {"200": {description: ok}}}
"""


def consumer_repository(root: Path, config: dict) -> Path:
    """A repository with a sound spec, an OpenAPI file and a broken spec, and `config` as its pre-commit config."""
    work = root / "consumer"
    work.mkdir()
    git(work, "init", "-q")
    (work / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (work / "specs").mkdir()
    (work / "specs" / "good.yaml").write_text(GOOD_SPEC, encoding="utf-8")
    (work / "openapi.yaml").write_text(OPENAPI, encoding="utf-8")
    (work / "specs" / "bad.yaml").write_text(BAD_SPEC, encoding="utf-8")
    git(work, "add", "-A")
    return work


BAD_SPEC = GOOD_SPEC.replace("head: auto", "head: sometimes")


def runs_the_hook_as_documented(work: Path, env: dict) -> None:
    def pre_commit(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", "run", "--files", *files],
            cwd=work, capture_output=True, text=True, env=env, timeout=900,
        )

    ran = pre_commit("openapi.yaml", "specs/good.yaml")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert re.search(r"^mtpc check\.+Passed$", ran.stdout, re.M), ran.stdout

    ran = pre_commit("openapi.yaml", "specs/good.yaml", "specs/bad.yaml")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert re.search(r"^mtpc check\.+Failed$", ran.stdout, re.M), ran.stdout
    line = next(i for i, text in enumerate(BAD_SPEC.splitlines(), 1) if "sometimes" in text)
    col = BAD_SPEC.splitlines()[line - 1].index("sometimes") + 1
    assert f"specs/bad.yaml:{line}:{col}: error:" in ran.stdout, ran.stdout
    assert "openapi" not in ran.stdout and "good.yaml" not in ran.stdout


def pre_commit_env(**extra: str) -> dict:
    return {
        **os.environ, **GIT_ENV, "PRE_COMMIT_HOME": str(cache_root() / "pre-commit" / "home"), "PRE_COMMIT_COLOR": "never",
        **extra,
    }


def documented_local_hook() -> dict:
    """The `repo: local` pre-commit config docs/ci.md shows (the README links there), as written."""
    doc = REPO / "docs" / "ci.md"
    blocks = re.findall(r"^( *)```yaml\n(.*?)^\1```", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    configs = [yaml.safe_load(textwrap.dedent(block)) for _, block in blocks if "repo: local" in block]
    assert len(configs) == 1, doc
    assert "docs/ci.md" in (REPO / "README.md").read_text(encoding="utf-8")  # one link from the README
    return configs[0]


def test_the_documented_local_hook_runs_the_installed_mtpc(tmp_path):
    """docs/ci.md's snippet works today: no release tag needed, the mtpc on PATH runs."""
    work = consumer_repository(tmp_path, documented_local_hook())
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # this checkout's mtpc, as installed
    runs_the_hook_as_documented(work, pre_commit_env(PATH=path))


def test_the_documented_snippets_name_no_release_that_does_not_exist():
    """Every `rev:` or `@vX.Y.Z` the docs give is a placeholder or a tag this repository has (`git tag`)."""
    tags = set(git(REPO, "tag", "--list").split())
    texts = {p: p.read_text(encoding="utf-8") for p in (REPO / "README.md", REPO / ".pre-commit-hooks.yaml", *(REPO / "docs").rglob("*.*"))}
    for path, text in texts.items():
        assert "OWNER" not in text, path
        named = set(re.findall(r"(?:rev:\s*|@)(v\d+\.\d+\.\d+)\b", text))
        assert named <= tags, (path, named - tags)


def test_the_hook_ignores_other_yaml_and_reports_a_bad_spec_at_its_line(tmp_path):
    """The tagged form, once releases exist: pre-commit installs the tagged mtpc in an environment of its own."""
    hook_repo = hook_repository()
    work = consumer_repository(tmp_path, {"repos": [{"repo": str(hook_repo), "rev": TAG, "hooks": [{"id": "mtpc-check"}]}]})
    # The hook environment's pip: no byte-compiling of what it installs (most of the install's time
    # on a small machine; Python compiles what the hook imports on first use instead).
    runs_the_hook_as_documented(work, pre_commit_env(PIP_NO_COMPILE="1"))


def test_the_hook_claims_yaml_and_leaves_the_choice_of_specs_to_mtpc():
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["types"] == ["yaml"] and "files" not in hook
    assert hook["entry"] == "mtpc check --skip-non-specs" and hook["args"] == ["--offline"]


@pytest.mark.parametrize(
    "text, is_spec",
    [
        ("mtpc: 1\nname: x\n", True),
        ("# yaml-language-server: $schema=https://x/spec.schema.json\n\n# notes\nmtpc: 1\n", True),
        ("\ufeff---\nmtpc: 1\n", True),
        ('"mtpc": 1\n', True),
        ("name: x\nmtpc: 2\n", True),  # a spec of another version: claimed, so check says which versions it reads
        ("openapi: 3.0.0\ninfo:\n  mtpc: 1\n", False),  # nested, not top-level
        ("description: |\n  mtpc: 1\n", False),
        ("mtpcx: 1\n", False),
    ],
)
def test_a_spec_is_a_yaml_file_with_a_top_level_mtpc_key(tmp_path, text, is_spec):
    path = tmp_path / "f.yaml"
    path.write_text(text, encoding="utf-8")
    assert is_spec_file(path) is is_spec


def test_every_shipped_spec_is_recognised_as_one():
    assert all(is_spec_file(p) for p in (REPO / "specs").glob("*.yaml"))
