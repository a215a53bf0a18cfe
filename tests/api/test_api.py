"""The Python API: mtpc.compile / mtpc.check / mtpc.diff return what the verbs report, as frozen objects."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mtpc
from mtpc.util.diagnostics import ExitCode, MtpcError

from tests.fixtures.package_files import remanifest

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "specs" / "qwen35-tiny-mtp.yaml"
NOHEAD = REPO / "specs" / "qwen35-tiny-nohead.yaml"


def test_import_mtpc_stays_light():
    code = "import sys, mtpc; print(sorted(m for m in ('numpy', 'onnx', 'yaml', 'jsonschema', 'mtpc.api.compiling') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_compile_returns_the_package_it_wrote(tmp_path):
    result = mtpc.compile(TINY, tmp_path / "pkg")
    assert isinstance(result, mtpc.CompileResult) and result.ok and result.exit_code == 0
    assert result.output == tmp_path / "pkg"
    on_disk = {p.relative_to(result.output).as_posix(): p.stat().st_size for p in result.output.rglob("*") if p.is_file()}
    assert {f.path: f.bytes for f in result.files} == on_disk
    assert any("float16" in note for note in result.notes)  # the CPU logits note compile prints
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.output = tmp_path  # type: ignore[misc]


def test_compile_of_a_bad_spec_raises_with_the_exit_code_and_writes_nothing(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("mtpc: 1\nname: bad\nsource:\n  synthetic: {seed: 0}\nprecison: {}\n")
    with pytest.raises(MtpcError) as caught:
        mtpc.compile(spec, tmp_path / "pkg")
    assert caught.value.exit_code is ExitCode.FINDINGS
    assert "precison" in str(caught.value)
    assert not (tmp_path / "pkg").exists()


def test_check_returns_findings_per_target(tmp_path):
    pkg = mtpc.compile(TINY, tmp_path / "pkg").output
    good = mtpc.check(pkg, NOHEAD)
    assert isinstance(good, mtpc.CheckResult) and good.ok and good.findings == ()
    assert [(t.path, t.kind) for t in good.targets] == [(pkg, "package"), (NOHEAD, "spec")]

    cfg = json.loads((pkg / "genai_config.json").read_text())
    cfg["model"]["decoder"]["filename"] = "missing.onnx"
    (pkg / "genai_config.json").write_text(json.dumps(cfg))
    bad = mtpc.check(pkg, tmp_path / "nowhere")
    assert bad.exit_code == ExitCode.USAGE  # one target could not be checked at all
    assert len(bad.unusable) == 1 and "nowhere" in bad.unusable[0].message
    assert bad.findings and all(f.file.endswith("genai_config.json") for f in bad.findings)
    assert "missing.onnx" in " ".join(f.message for f in bad.findings)
    assert bad.summary.startswith(f"{len(bad.findings)} finding")


def test_diff_returns_sorted_changes_and_the_exit_code(tmp_path):
    a = mtpc.compile(TINY, tmp_path / "a").output
    b = mtpc.compile(TINY, tmp_path / "b").output
    same = mtpc.diff(a, b)
    assert isinstance(same, mtpc.DiffResult) and same.ok and same.exit_code == 0 and same.summary == "no differences"
    specs = mtpc.diff(TINY, NOHEAD)
    assert specs.exit_code == ExitCode.FINDINGS and specs.changes
    assert any(c.file == "<ir>" and c.pointer == "/architecture/mtp_num_layers" for c in specs.changes)
    with pytest.raises(MtpcError) as caught:
        mtpc.diff(a, TINY)
    assert caught.value.exit_code is ExitCode.USAGE


def test_the_cli_reports_what_the_api_returns(tmp_path, capsys):
    from mtpc.cli.main import main

    a = mtpc.compile(TINY, tmp_path / "a").output
    b = mtpc.compile(NOHEAD, tmp_path / "b").output
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["changes"] == [c.to_json() for c in mtpc.diff(a, b).changes]
    assert main(["check", str(a), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"] == mtpc.check(a).summary


def test_check_offline_and_warnings_through_the_api(tmp_path):
    spec = tmp_path / "hf.yaml"
    spec.write_text("mtpc: 1\nname: away\nsource: {hf: gone}\n", encoding="utf-8")
    other = tmp_path / "openapi.yaml"
    other.write_text("openapi: 3.0.0\n", encoding="utf-8")
    with_source_absent = mtpc.check(spec)
    assert with_source_absent.exit_code == ExitCode.USAGE and "mtpc check --offline" in with_source_absent.unusable[0].hint
    offline = mtpc.check(spec, other, offline=True, skip_non_specs=True)
    assert offline.ok and offline.skipped == (other,)
    (note,) = offline.findings
    assert note.severity == "note" and not note.blocking and note.line == 3
    assert offline.summary == "ok (1 target; 1 checked offline, without the checkpoint; 1 YAML file not an mtpc spec, skipped)"

    pkg = mtpc.compile(TINY, tmp_path / "pkg").output
    (pkg / "tokenizer_config.json").unlink()
    assert not mtpc.check(pkg).ok  # written with it: its manifest.json lists it
    remanifest(pkg)  # as if compiled from a source that shipped no tokenizer_config.json
    warned = mtpc.check(pkg)
    assert warned.ok and [f.severity for f in warned.findings] == ["warning"]
    assert warned.findings[0].file == str(pkg / "tokenizer_config.json")
