"""Broken sources through `python -m mtpc compile`: one diagnostic, exit 1 or 2, no traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.gguf_writer import write_gguf

from .conftest import write_spec


def _truncated(keep: float):
    def make(path: Path, arch) -> None:
        write_gguf(path, arch)
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])

    return make


def _without_head_projection(path: Path, arch) -> None:
    write_gguf(path, arch, omit=(f"blk.{arch.num_layers}.nextn.eh_proj.weight",))


def _llama(path: Path, arch) -> None:
    write_gguf(path, arch, gguf_arch="llama")


CASES = {
    # name: (writer, a word the diagnostic must contain)
    "truncated-data": (_truncated(0.6), "truncated"),
    "truncated-header": (_truncated(0.0005), "truncated"),
    "missing-head-tensor": (_without_head_projection, "nextn.eh_proj"),
    "unknown-architecture": (_llama, "llama"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_gguf_gives_one_diagnostic_and_no_output(tmp_path, arch, case):
    writer, word = CASES[case]
    writer(tmp_path / "model.gguf", arch)
    spec = write_spec(tmp_path / "spec.yaml", "broken", "{gguf: model.gguf}")
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = subprocess.run(
        [sys.executable, "-m", "mtpc", "compile", str(spec), "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode in (1, 2), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    assert word in errors[0].lower(), errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no package, no temporary folder
