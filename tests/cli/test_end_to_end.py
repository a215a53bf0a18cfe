"""The verbs end to end on the tiny spec: compile, check, plan, diff and verify a real package."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from mtpc.cli.main import main
from mtpc.passes import default_pipeline
from tests.cli.test_main import run_mtpc
from tests.fixtures.package_files import files_of, remanifest

SPECS = Path(__file__).resolve().parents[2] / "specs"
TINY = SPECS / "qwen35-tiny-mtp.yaml"


def compile_with_hash_seed(spec: Path, out: Path, seed: str) -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONHASHSEED": seed}
    proc = subprocess.run([sys.executable, "-m", "mtpc", "compile", "-q", str(spec), "-o", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("e2e") / "pkg"
    compile_with_hash_seed(TINY, out, "1")
    return out


def spec_variant(tmp_path: Path, old: str, new: str) -> Path:
    text = TINY.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "variant.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def test_compile_twice_gives_byte_identical_directories(package, tmp_path):
    again = tmp_path / "again"
    compile_with_hash_seed(TINY, again, "12345")
    assert files_of(again) == files_of(package)
    assert run_mtpc("diff", str(package), str(again)).returncode == 0


def test_compiled_package_passes_check_and_has_its_card(package, capsys):
    assert main(["check", str(package), str(TINY)]) == 0
    assert "mtpc check: ok (2 targets)" in capsys.readouterr().err
    card = (package / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\n") and "\n---\n\n# qwen35-tiny-mtp\n" in card and "og.MtpGenerator" in card


def test_compile_default_output_directory_and_json(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "--format", "json", str(TINY)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format_version"] == 1 and doc["output"] == os.path.join("out", "qwen35-tiny-mtp")
    on_disk = files_of(tmp_path / "out" / "qwen35-tiny-mtp")
    assert sorted(f["path"] for f in doc["files"]) == sorted(on_disk)
    assert all(f["bytes"] == len(on_disk[f["path"]]) for f in doc["files"])


def test_invalid_spec_exits_1_with_position_and_no_traceback(tmp_path):
    spec = spec_variant(tmp_path, "precision:", "precison:")
    proc = run_mtpc("compile", str(spec), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1
    assert f"{spec}:" in proc.stderr and "unknown key 'precison'" in proc.stderr
    line = next(i for i, text in enumerate(spec.read_text().splitlines(), 1) if text.startswith("precison:"))
    assert f"{spec}:{line}:1:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_failed_compile_leaves_no_directory(tmp_path):
    # The source has no head but the spec demands one: refused before anything is written.
    spec = spec_variant(tmp_path, "mtp_num_layers: 1", "mtp_num_layers: 0")
    spec.write_text(spec.read_text().replace("head: auto", "head: on", 1))
    proc = run_mtpc("compile", str(spec), "-o", str(tmp_path / "pkg"))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "pkg").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["variant.yaml"]


def test_plan_against_the_package_and_an_edited_copy(package, tmp_path, capsys):
    assert main(["plan", "--format", "json", str(TINY), "--against", str(package)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {f["action"] for f in doc["files"]} == {"unchanged"}
    assert [p["pass"] for p in doc["passes"]][0] == "head-detection"

    edited = tmp_path / "edited"
    shutil.copytree(package, edited)
    (edited / "stale.txt").write_text("old")
    (edited / "mtp" / "genai_config.json").unlink()
    (edited / "model.onnx.data").write_bytes(b"different")
    assert main(["plan", "--format", "json", str(TINY), "--against", str(edited)]) == 0
    actions = {f["path"]: f["action"] for f in json.loads(capsys.readouterr().out)["files"]}
    assert actions["stale.txt"] == "remove"
    assert actions["mtp/genai_config.json"] == "create"
    assert actions["model.onnx.data"] == "change"
    assert actions["genai_config.json"] == "unchanged"
    # plan writes nothing
    assert (edited / "stale.txt").exists() and not (edited / "mtp" / "genai_config.json").exists()


def test_plan_prints_ir_after_every_pass(tmp_path, capsys):
    assert main(["plan", "-q", str(TINY), "--against", str(tmp_path), "--print-ir-after-all"]) == 0
    text = capsys.readouterr().out
    names = [p.name for p in default_pipeline().passes]
    assert [line[len("--- IR after "):-len(" ---")] for line in text.splitlines() if line.startswith("--- IR after ")] == names
    assert len(names) >= 6
    assert "  + README.md  (create)" in text


def test_diff_of_two_specs_shows_ir_and_artifact_paths(tmp_path, capsys):
    # The window pinned at what `auto` gives for 4 drafts, so only the runtime's settings change.
    variant = spec_variant(tmp_path, "max_draft_tokens: 4", "max_draft_tokens: 2\n    state_window: 5")
    assert main(["diff", str(TINY), str(variant)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "~ <ir>:/targets/onnxruntime_genai/max_draft_tokens: 4 -> 2" in lines
    assert '~ <ir>:/targets/onnxruntime_genai/state_window: "auto" -> 5' in lines
    assert "~ genai_config.json:/speculative/max_draft_tokens: 4 -> 2" in lines
    # the severity summary (a line and one per changed file) comes first, the one-line summary last
    verdicts = [line for line in lines[1:] if line.startswith("  minor ")]
    assert lines[0] == "severity: minor" and lines[1 : 1 + len(verdicts)] == verdicts
    assert {v.split()[1] for v in verdicts} >= {"<ir>:", "README.md:", "genai_config.json:"}
    assert "  minor     genai_config.json: settings changed" in verdicts
    rows = lines[1 + len(verdicts) : -1]  # no row here repeats: one row per change
    assert lines[-1] == f"{len(rows)} differences in {len(verdicts)} files: {len(rows)} changed"
    assert main(["diff", str(TINY), str(TINY)]) == 0


def test_check_finds_a_hand_broken_compiled_package(package, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(package, broken)
    hf = json.loads((broken / "config.json").read_text())
    hf["speculator_config"]["target_hidden_output"] = "hidden_states.9"
    (broken / "config.json").write_text(json.dumps(hf))
    cfg = json.loads((broken / "genai_config.json").read_text())
    cfg["model"]["decoder"]["outputs"]["present_key_names"] = "present.%d.k"
    (broken / "genai_config.json").write_text(json.dumps(cfg))
    metadata = (broken / "inference_metadata.yaml").read_text()
    assert "present.3.value" in metadata
    (broken / "inference_metadata.yaml").write_text(metadata.replace("present.3.value]", "present.3.v]"))
    assert main(["check", str(broken)]) == 1
    # Each finding at its file's line and column (tests/checks/test_completeness.py holds which); here, what and where.
    out = [re.sub(r"^(\S+?):\d+:\d+: ", r"\1:", line) for line in capsys.readouterr().out.splitlines()]
    # onnx-genai's files are held to its own main graph, decoder.onnx (model.onnx's state is windowed).
    assert f"{broken}/config.json:/speculator_config/target_hidden_output: 'hidden_states.9' is not an output of decoder.onnx" in out
    assert f"{broken}/genai_config.json:/model/decoder/outputs/present_key_names: 'present.1.k' is not an output of model.onnx" in out
    assert f"{broken}/inference_metadata.yaml:/model/io/kv_outputs/3: 'present.3.v' is not an output of decoder.onnx" in out


def test_verify_runs_reference_greedy_and_speculative(package, capsys):
    assert main(["verify", "-q", "--format", "json", str(package), "--spec", str(TINY), "--new-tokens", "6"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["format_version"] == 1
    assert {c["check"] for c in doc["checks"]} >= {
        "main prefill logits", "main step logits", "mtp head logits", "onnx-genai head hidden state", "speculative == greedy"
    }
    assert len(doc["greedy"]) == 6 and doc["speculative"] == doc["greedy"] == doc["reference_greedy"]
    assert doc["steps"] == ["static checks", "onnxruntime", "onnxruntime-genai"] and doc["static_only"] is None
    assert 0.0 <= doc["acceptance_rate"] <= 1.0


def test_verify_catches_a_wrong_onnx_genai_head(package, tmp_path, capsys):
    """Swap in the sidecar head of other weights: only the onnx-genai head's check may fail."""
    other = tmp_path / "other"
    assert main(["compile", "-q", str(spec_variant(tmp_path, "seed: 0 ", "seed: 1 ")), "-o", str(other)]) == 0
    mixed = tmp_path / "mixed"
    shutil.copytree(package, mixed)
    for name in ("mtp_sidecar/mtp_sidecar.onnx", "mtp_sidecar/mtp_sidecar.onnx.data"):
        shutil.copyfile(other / name, mixed / name)
    remanifest(mixed)  # as if compile had mixed them up: the manifest alone would say which files changed
    capsys.readouterr()
    assert main(["verify", "-q", str(mixed), "--spec", str(TINY), "--new-tokens", "4"]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith("FAIL onnx-genai head hidden state")


def test_verify_against_the_wrong_weights_is_a_mismatch(package, tmp_path, capsys):
    other = spec_variant(tmp_path, "seed: 0 ", "seed: 1 ")
    assert main(["verify", "-q", str(package), "--spec", str(other), "--new-tokens", "4"]) == 1
    out = capsys.readouterr().out
    # The package's provenance.json says why: it was compiled from another spec (tests/cli/test_verify_provenance.py).
    assert "FAIL main prefill logits" in out
    assert out.rstrip().splitlines()[-1].startswith("verify: MISMATCH: the package was compiled from another spec")


@pytest.fixture(scope="module")
def paged_package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("paged") / "pkg"
    assert main(["compile", "-q", str(SPECS / "qwen35-tiny-paged.yaml"), "-o", str(out)]) == 0
    return out


def test_verify_paged_package_is_not_run_and_exits_2(paged_package, capsys):
    """Only the static checks can run on CPU: a gate must not pass as if the package had been run."""
    spec = SPECS / "qwen35-tiny-paged.yaml"
    capsys.readouterr()
    assert main(["verify", "-q", str(paged_package), "--spec", str(spec)]) == 2
    captured = capsys.readouterr()
    assert captured.out.rstrip().splitlines()[-1] == (
        "verify: NOT RUN (paged packages cannot run on CPU); only the static checks passed"
    )
    assert "verify: ok" not in captured.out
    assert "pass --static-only to accept the static checks as the verdict" in captured.err
    assert main(["verify", "-q", "--format", "json", str(paged_package), "--spec", str(spec)]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["exit_code"] == 2 and doc["checks"] == []
    assert doc["steps"] == ["static checks"] and doc["static_only"] == "paged packages cannot run on CPU"


def test_verify_static_only_accepts_the_static_checks(paged_package, capsys):
    spec = SPECS / "qwen35-tiny-paged.yaml"
    capsys.readouterr()
    assert main(["verify", "-q", "--static-only", str(paged_package), "--spec", str(spec)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "verify: static checks only (paged packages cannot run on CPU)"
    assert main(["verify", "-q", "--static-only", "--format", "json", str(paged_package), "--spec", str(spec)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["steps"] == ["static checks"]


def test_verify_static_only_still_fails_a_broken_package(paged_package, tmp_path, capsys):
    broken = tmp_path / "pkg"
    shutil.copytree(paged_package, broken)
    (broken / "model.onnx.data").unlink()
    assert main(["verify", "-q", "--static-only", str(broken), "--spec", str(SPECS / "qwen35-tiny-paged.yaml")]) == 1
    out = capsys.readouterr().out
    assert "FAIL static: model.onnx:/: 'model.onnx.data' does not exist in the package" in out
    assert out.rstrip().endswith("verify: FAILED (the static checks, as `mtpc check` reports them)")


def test_verify_of_a_package_with_a_head_against_a_headless_spec_fails(package, capsys):
    nohead = SPECS / "qwen35-tiny-nohead.yaml"
    assert main(["verify", "-q", str(package), "--spec", str(nohead), "--new-tokens", "2"]) == 1
    out = capsys.readouterr().out
    assert ("FAIL spec: package has an MTP head but the spec's source ships none: "
            "is this the spec it was compiled from?") in out
    assert "verify: ok" not in out


def test_plan_says_when_compile_would_refuse_the_destination(tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(["plan", "-q", str(TINY), "--against", str(foreign)]) == 0
    assert f"note: compile -o {foreign} would refuse without --force: " in capsys.readouterr().out
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    # Refused whatever the flags: plan refuses it as compile does (tests/output/test_write.py).
    assert main(["plan", "--format", "json", str(TINY), "--against", str(a_file)]) == 2
    assert "is not a directory" in json.loads(capsys.readouterr().out)["diagnostics"][0]["message"]
    assert main(["plan", "--format", "json", str(TINY), "--against", str(tmp_path / "new")]) == 0
    assert json.loads(capsys.readouterr().out)["compile_would_refuse"] is None


def test_markdown_diff_says_file_added_and_removed(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    for package in (old, new):
        (package / "genai_config.json").write_text("{}")  # what makes a folder a package, to diff
    (old / "gone.json").write_text("{}")
    (new / "fresh.json").write_text("{}")
    assert main(["diff", "--format", "markdown", str(old), str(new)]) == 1
    text = capsys.readouterr().out
    assert "| ➕ | file added |  |  |" in text and "| ➖ | file removed |  |  |" in text
    assert "null" not in text


def test_verify_of_a_package_with_nothing_onnxruntime_genai_can_run_is_not_run(tmp_path, capsys):
    spec = SPECS.parent / "tests" / "cases" / "valid" / "only_onnx_genai.yaml"
    assert main(["compile", "-q", str(spec), "-o", str(tmp_path / "pkg")]) == 0
    capsys.readouterr()
    assert main(["verify", "-q", str(tmp_path / "pkg"), "--spec", str(spec)]) == 2
    assert "verify: NOT RUN (no genai_config.json: nothing to run on onnxruntime)" in capsys.readouterr().out
    assert main(["verify", "-q", "--static-only", str(tmp_path / "pkg"), "--spec", str(spec)]) == 0
