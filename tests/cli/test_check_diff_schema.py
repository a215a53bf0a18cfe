"""`check`, `diff` and `schema` on hand-made packages, in text, JSON, GitHub and Markdown forms."""

from __future__ import annotations

import json

import onnx

from mtpc.cli.main import main
from mtpc.schema.validation import load_schema, schema_names
from tests.cli import handmade as hm
from tests.cli.test_main import run_mtpc


def broken_package(root):
    """Two independent faults: a renamed KV output and a missing required key."""
    cfg = hm.main_config()
    del cfg["model"]["vocab_size"]
    inputs, outputs = hm.main_io()
    return hm.write_package(root, config=cfg, main=(inputs, hm.renamed(outputs, "present.3.value", "present.3.v")))


def test_check_clean_package_exits_0_and_prints_nothing_on_stdout(tmp_path):
    proc = run_mtpc("check", str(hm.write_package(tmp_path / "pkg")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert "ok" in proc.stderr


def line_of(path, text: str) -> tuple[int, int]:
    """Where `text` first appears in the file (1-based line and column), found by plain search."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return number, line.index(text) + 1
    raise AssertionError(f"{text!r} is not in {path}")


def test_check_broken_package_one_line_per_finding(tmp_path):
    pkg = broken_package(tmp_path / "pkg")
    proc = run_mtpc("check", str(pkg))
    assert proc.returncode == 1
    config = pkg / "genai_config.json"
    model, present = line_of(config, '"model"'), line_of(config, '"present_value_names"')
    assert proc.stdout.splitlines() == [
        f"{config}:{model[0]}:{model[1]}: /model: 'vocab_size' is a required property (schema genai_config.schema.json)",
        f"{config}:{present[0]}:{present[1]}: /model/decoder/outputs/present_value_names: 'present.3.value' is not an output of model.onnx",
    ]
    assert "2 findings in 1 target" in proc.stderr


def test_check_gathers_findings_of_every_target(tmp_path, capsys):
    good = hm.write_package(tmp_path / "good")
    bad = broken_package(tmp_path / "bad")
    assert main(["check", "--format", "json", str(good), str(bad)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["format_version"] == 1 and doc["command"] == "check" and doc["ok"] is False
    assert [t["target"] for t in doc["targets"]] == [str(good), str(bad)]
    assert doc["targets"][0]["findings"] == []
    assert {f["path"] for f in doc["targets"][1]["findings"]} == {"/model", "/model/decoder/outputs/present_value_names"}


def test_check_github_annotations(tmp_path, capsys):
    pkg = broken_package(tmp_path / "pkg")
    assert main(["check", "--format", "github", str(pkg)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    line, col = line_of(pkg / "genai_config.json", '"present_value_names"')
    assert lines[1] == (  # outside the working directory, the path stays absolute
        f"::error file={pkg}/genai_config.json,line={line},col={col},title=mtpc check::/model/decoder/outputs/present_value_names: "
        "'present.3.value' is not an output of model.onnx"
    )


def test_diff_of_identical_packages_exits_0(tmp_path):
    a = hm.write_package(tmp_path / "a")
    b = hm.write_package(tmp_path / "b")
    proc = run_mtpc("diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "no differences"


def test_diff_reports_config_paths_and_graph_outputs(tmp_path, capsys):
    a = hm.write_package(tmp_path / "a")
    cfg = hm.main_config()
    cfg["model"]["context_length"] = 256
    inputs, outputs = hm.main_io()
    b = hm.write_package(tmp_path / "b", config=cfg, main=(inputs, hm.renamed(outputs, "logits", "scores")))
    # What the graphs say, read with onnx itself: one output renamed, nothing else in the interface.
    names = lambda p: {o.name for o in onnx.load(p / "model.onnx", load_external_data=False).graph.output}  # noqa: E731
    assert names(a) - names(b) == {"logits"} and names(b) - names(a) == {"scores"}
    assert main(["diff", str(a), str(b)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "severity: major",
        "  major     model.onnx: interface changed: outputs +1 -1",
        "  minor     genai_config.json: settings changed",
    ]
    assert lines[3] == "~ genai_config.json:/model/context_length: 128 -> 256"
    assert lines[4].startswith('- model.onnx:/outputs[name=logits] (was {"dtype": "float32", "name": "logits"')
    assert lines[5].startswith('+ model.onnx:/outputs[name=scores] = {"dtype": "float32", "name": "scores"')
    assert lines[6:] == ["3 differences in 2 files: 1 added, 1 removed, 1 changed"]
    assert main(["diff", "--format", "json", str(a), str(b)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["format_version"] == 1 and doc["summary"] == "3 differences in 2 files: 1 added, 1 removed, 1 changed"
    assert doc["severity"] == "major"
    assert doc["changes"][0] == {"file": "genai_config.json", "path": "/model/context_length", "kind": "changed", "old": 128, "new": 256}
    assert [(f["file"], f["severity"]) for f in doc["files"]] == [("model.onnx", "major"), ("genai_config.json", "minor")]


def test_diff_markdown_for_a_pull_request(tmp_path, capsys):
    a = hm.write_package(tmp_path / "a")
    cfg = hm.main_config()
    cfg["model"]["mtp"]["outputs"]["hidden_states"] = "next|hidden"
    del cfg["speculative"]
    b = hm.write_package(tmp_path / "b", config=cfg)
    assert main(["diff", "--format", "markdown", str(a), str(b)]) == 1
    text = capsys.readouterr().out
    assert text.startswith(f"### mtpc diff: `{a}` → `{b}`")
    assert "**🔵 minor** · 2 differences in 1 file: 1 removed, 1 changed" in text
    assert "<details><summary><code>genai_config.json</code> · 🔵 minor · 2 changes</summary>" in text
    assert text.rstrip().endswith("</sub>\n<!-- mtpc-diff -->")
    assert '| ✏️ | `/model/mtp/outputs/hidden_states` | `"hidden_states_out"` | `"next\\|hidden"` |' in text
    assert '| ➖ | `/speculative` | `{"max_draft_tokens": 2}` |  |' in text


def test_diff_spec_against_directory_is_refused_with_a_hint(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("mtpc: 1\n")
    assert main(["diff", str(spec), str(hm.write_package(tmp_path / "pkg"))]) == 2
    assert "mtpc plan SPEC --against DIR" in capsys.readouterr().err


def test_schema_lists_and_prints(capsys):
    assert main(["schema"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == [n.removesuffix(".schema.json") for n in schema_names()]
    assert "genai_config" in listed
    assert main(["schema", "genai_config"]) == 0
    assert json.loads(capsys.readouterr().out) == load_schema("genai_config")
    assert main(["schema", "--format", "json", "genai_config.schema.json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format_version"] == 1 and doc["schema"] == load_schema("genai_config")


def test_schema_unknown_name_suggests(capsys):
    assert main(["schema", "genai_cofig"]) == 2
    assert "did you mean 'genai_config'?" in capsys.readouterr().err


def test_diff_json_says_ok_only_without_differences(tmp_path, capsys):
    a = hm.write_package(tmp_path / "a")
    assert main(["diff", "--format", "json", str(a), str(hm.write_package(tmp_path / "same"))]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    cfg = hm.main_config()
    cfg["model"]["context_length"] = 256
    assert main(["diff", "--format", "json", str(a), str(hm.write_package(tmp_path / "b", config=cfg))]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_diff_into_a_closed_pipe_exits_141_not_0(tmp_path):
    """`mtpc diff a b | head -0` with differences: a script must not read the pipe's early close as "no differences"."""
    import subprocess
    import sys

    a = hm.write_package(tmp_path / "a")
    cfg = hm.main_config()
    cfg["model"]["context_length"] = 256
    b = hm.write_package(tmp_path / "b", config=cfg)
    proc = subprocess.Popen([sys.executable, "-m", "mtpc", "diff", str(a), str(b)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait() == 141 and stderr == ""


def test_check_of_a_checkpoint_file_says_what_check_takes(tmp_path, capsys):
    gguf = tmp_path / "good.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00\xff\xfe")
    assert main(["check", str(gguf)]) == 2
    err = capsys.readouterr().err
    assert "is neither a spec file (.yaml, .yml) nor a package folder" in err
    assert "not UTF-8" not in err


def test_check_checks_every_existing_target_and_reports_each_missing_one(tmp_path, capsys):
    pkg = broken_package(tmp_path / "pkg")
    missing_a, missing_b = tmp_path / "nope", tmp_path / "gone"
    assert main(["check", str(missing_a), str(pkg), str(missing_b)]) == 2
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2  # the broken package's two findings, still reported
    assert f"error: '{missing_a}' does not exist" in captured.err
    assert f"error: '{missing_b}' does not exist" in captured.err
    assert "2 findings in 1 target; 2 targets could not be checked" in captured.err

    assert main(["check", "--format", "json", str(pkg), str(missing_a)]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], doc["exit_code"]) == (False, 2)
    assert [t["target"] for t in doc["targets"]] == [str(pkg)] and len(doc["targets"][0]["findings"]) == 2
    assert [d["message"] for d in doc["diagnostics"]] == [f"'{missing_a}' does not exist"]


def test_check_of_a_clean_package_and_a_missing_one_is_still_a_usage_error(tmp_path, capsys):
    assert main(["check", str(hm.write_package(tmp_path / "pkg")), str(tmp_path / "nope")]) == 2
    assert "1 target could not be checked" in capsys.readouterr().err
