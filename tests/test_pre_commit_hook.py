"""The pre-commit hook runs `mtpc check` on the specs a commit touches."""

import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_hook_checks_every_shipped_spec():
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["entry"] == "mtpc check"
    specs = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "specs").glob("*.yaml"))
    assert specs and all(re.search(hook["files"], s) for s in specs)
    # pre-commit appends the matched files to the entry; the shipped specs must pass.
    result = subprocess.run([sys.executable, "-m", "mtpc", "check", *specs], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
