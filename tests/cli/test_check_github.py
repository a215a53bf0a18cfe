"""`mtpc check --format github`: every outcome is valid workflow commands on stdout, the ones that stop a target
from being checked (exit 2) and argument mistakes included, each at the file, line and column where that is known.

GitHub reads stdout line by line; a line that is not a workflow command is plain log text, so an error printed
only on stderr leaves the pull request without an annotation (docs/ci.md, "--format github").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mtpc.cli.main import main

REPO = Path(__file__).resolve().parents[2]
NOHEAD = (REPO / "specs" / "qwen35-tiny-nohead.yaml").read_text(encoding="utf-8")

# https://docs.github.com/actions/reference/workflow-commands-for-github-actions: `::command key=value,...::message`,
# properties and message with their reserved characters escaped (%, CR, LF; and ':' ',' in properties).
COMMAND = re.compile(r"^::(error|warning|notice)(?: ((?:[a-z]+=[^,:\r\n]*)(?:,[a-z]+=[^,:\r\n]*)*))?::([^\r\n]*)$")


def annotations(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        match = COMMAND.match(line)
        assert match, f"not a workflow command: {line!r}"
        props = dict(p.split("=", 1) for p in match.group(2).split(",")) if match.group(2) else {}
        found.append({"command": match.group(1), **props, "message": match.group(3)})
    return found


def check_github(capsys, *args: str) -> tuple[int, list[dict], str]:
    code = main(["check", "--format", "github", *args])
    captured = capsys.readouterr()
    return code, annotations(captured.out), captured.err


def spec_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_yaml_syntax_error_is_an_annotation_at_the_parsers_position(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = "mtpc: 1\nname: x\nsource: {synthetic: {seed: 0}\nmtp: {head: auto}\n"  # the flow mapping is never closed
    spec_file(tmp_path, "broken.yaml", text)
    with pytest.raises(yaml.MarkedYAMLError) as parsed:
        yaml.safe_load(text)
    where = (parsed.value.problem_mark.line + 1, parsed.value.problem_mark.column + 1)  # PyYAML's own position
    code, (note,), err = check_github(capsys, "broken.yaml")
    assert code == 2
    assert note["command"] == "error" and note["file"] == "broken.yaml" and note["title"] == "mtpc check"
    assert (int(note["line"]), int(note["col"])) == where
    assert "not valid YAML" in note["message"]
    assert f"broken.yaml:{where[0]}:{where[1]}: error: not valid YAML" in err  # people reading the log still get the caret


def test_a_missing_checkpoint_is_an_annotation_at_the_source_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec_file(tmp_path, "spec.yaml", "mtpc: 1\nname: x\nsource:\n  hf: checkpoints/absent\n")
    code, (note,), _ = check_github(capsys, "spec.yaml")
    assert code == 2
    assert (note["command"], note["file"], note["line"], note["col"]) == ("error", "spec.yaml", "4", "7")
    assert note["message"].startswith("hf source 'checkpoints/absent' does not exist")
    assert "%0Ahint: " in note["message"] and "mtpc check --offline" in note["message"]


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda d: None, "does not exist"),  # a missing file
        (lambda d: (d / "target").mkdir(), "not an mtpc package"),  # an empty folder
        (lambda d: (d / "target").write_text("a text file\n"), "neither a spec file"),
    ],
    ids=["missing", "empty-folder", "not-a-spec"],
)
def test_a_target_that_cannot_be_checked_is_an_annotation_on_that_target(tmp_path, capsys, monkeypatch, make, says):
    monkeypatch.chdir(tmp_path)
    make(tmp_path)
    code, (note,), _ = check_github(capsys, "target")
    assert code == 2
    assert (note["command"], note["file"]) == ("error", "target") and "line" not in note
    assert says in note["message"]


def test_every_target_is_annotated_the_usable_ones_too(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec_file(tmp_path, "bad.yaml", NOHEAD.replace("head: auto", "head: sometimes"))
    spec_file(tmp_path, "broken.yaml", "mtpc: 1\n  name: [\n")
    code, notes, err = check_github(capsys, "bad.yaml", "broken.yaml", "missing.yaml")
    assert code == 2  # a target could not be checked
    assert [(n["file"], "line" in n) for n in notes] == [("bad.yaml", True), ("broken.yaml", True), ("missing.yaml", False)]
    assert "mtpc check: 1 finding in 1 target; 2 targets could not be checked" in err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--offline", "--bogus", "x.yaml"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required"),
    ],
)
def test_an_argument_mistake_is_an_annotation_too(capsys, argv, says):
    code, (note,), err = check_github(capsys, *argv)
    assert code == 2
    assert note["command"] == "error" and note["title"] == "mtpc check" and "file" not in note
    assert says in note["message"]
    assert err.startswith("usage: mtpc check")


def test_a_bug_is_an_annotation_too(capsys, monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("mtpc.api.check", broken)
    code, (note,), err = check_github(capsys, str(tmp_path))
    assert code == 3
    assert note["command"] == "error" and "internal error: RuntimeError: boom" in note["message"]
    assert "this is a bug in mtpc" in err
