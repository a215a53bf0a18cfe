"""`mtpc compile` tells the user what a pass decided on their behalf (ir.notes)."""

from __future__ import annotations

import json
from pathlib import Path

from mtpc.cli.main import main

STATIC = Path(__file__).resolve().parents[1] / "cases" / "valid" / "static_kv_cache.yaml"
SKIPPED = "MTP head skipped: a static KV cache target cannot roll back rejected drafts;"


def test_compile_prints_the_static_cache_note(tmp_path, capsys):
    assert main(["compile", "-q", str(STATIC), "-o", str(tmp_path / "pkg")]) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.out.splitlines() if line.startswith("note: ")]
    assert [line for line in notes if line.startswith(f"note: {SKIPPED}")], captured.out
    assert not (tmp_path / "pkg" / "mtp").exists()


def test_compile_json_carries_the_static_cache_note(tmp_path, capsys):
    assert main(["compile", "--format", "json", str(STATIC), "-o", str(tmp_path / "pkg")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [note for note in doc["notes"] if note.startswith(SKIPPED)]
