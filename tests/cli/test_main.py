"""The exit-code table, help, JSON envelopes and internal errors, through the real entry points."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mtpc.cli import main as cli_main
from mtpc.cli.main import main
from mtpc.cli.report import print_json


def run_mtpc(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtpc", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_help_teaches_verbs_exit_codes_and_examples():
    proc = run_mtpc("--help")
    assert proc.returncode == 0
    for verb in ("compile", "plan", "check", "diff", "inspect", "schema", "verify"):
        assert verb in proc.stdout
    assert "exit codes" in proc.stdout and "mtpc check out/tiny --format github" in proc.stdout


@pytest.mark.parametrize("verb", ["compile", "plan", "check", "diff", "inspect", "schema", "verify"])
def test_every_verb_has_help_with_examples_and_both_formats(verb, capsys):
    assert main([verb, "--help"]) == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "mtpc " + verb in text
    assert "--format" in text and "json" in text


def test_unknown_verb_is_a_usage_error():
    proc = run_mtpc("frobnicate")
    assert proc.returncode == 2
    assert "invalid choice: 'frobnicate'" in proc.stderr


def test_missing_argument_and_bad_option_are_usage_errors(capsys):
    assert main(["compile"]) == 2
    assert main(["check", "--format", "yaml", "x"]) == 2
    assert "invalid choice: 'yaml'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["compile", "no/such/spec.yaml"],
        ["plan", "no/such/spec.yaml"],
        ["check", "no/such/dir"],
        ["diff", "no/such/a", "no/such/b"],
        ["inspect", "no/such/model.gguf"],
        ["verify", "no/such/dir", "--spec", "no/such/spec.yaml"],
    ],
)
def test_missing_input_files_exit_2_without_traceback(argv, tmp_path):
    proc = run_mtpc(*argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_usage_error_in_json_format_is_a_json_document(tmp_path):
    proc = run_mtpc("check", "--format", "json", str(tmp_path / "nope"))
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["format_version"] == 1 and doc["ok"] is False and doc["exit_code"] == 2
    assert "does not exist" in doc["diagnostics"][0]["message"]


def test_a_directory_that_is_not_a_package_is_a_usage_error(tmp_path, capsys):
    assert main(["check", str(tmp_path)]) == 2
    assert "not an mtpc package" in capsys.readouterr().err


def test_internal_errors_exit_3_and_say_it_is_a_bug(monkeypatch, capsys):
    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr("mtpc.schema.validation.schema_names", broken)
    assert main(["schema"]) == 3
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: boom" in err
    assert "this is a bug in mtpc" in err and "--traceback" in err and "Traceback (most recent call last)" not in err

    assert main(["schema", "--traceback"]) == 3
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_console_script_entry_point_is_main():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "mtpc"]
    assert ep.value == "mtpc.cli.main:main"
    assert ep.load() is cli_main.main


def test_version():
    proc = run_mtpc("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("mtpc ")


@pytest.mark.parametrize("argv", [["schema", "spec"], ["schema"]])  # a large output, and one small enough to sit in the buffer
def test_a_closed_pipe_exits_141_quietly(argv):
    """`mtpc schema spec | head -0`: the reader leaves early; mtpc exits like a process killed by SIGPIPE, silently."""
    proc = subprocess.Popen([sys.executable, "-m", "mtpc", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before mtpc has printed anything (mtpc is still importing)
    stderr = proc.stderr.read().decode()
    assert proc.wait() == 141  # 128 + SIGPIPE, as a shell reports it; never 0, which would hide a diff's or check's verdict
    assert stderr == ""


def test_usage_errors_in_json_format_are_json_documents_too(capsys):
    assert main(["compile", "--format", "json"]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc == {
        "format_version": 1,
        "command": "compile",
        "ok": False,
        "exit_code": 2,
        "diagnostics": [{"severity": "error", "message": "the following arguments are required: SPEC"}],
    }
    assert captured.err.startswith("usage: mtpc compile")
    assert main(["diff", "--format=json", "a", "b", "--colour"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert (doc["command"], doc["ok"], doc["exit_code"]) == ("diff", False, 2)
    assert doc["diagnostics"] == [{"severity": "error", "message": "unrecognized arguments: --colour"}]
    assert "message" not in doc  # one shape for every error: the diagnostics list, as a verb's own errors have


def test_usage_errors_in_text_format_print_nothing_on_stdout(capsys):
    assert main(["compile"]) == 2
    assert capsys.readouterr().out == ""


def test_an_unknown_option_after_a_verb_shows_the_verbs_usage(capsys):
    assert main(["diff", "a", "b", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: mtpc diff ")
    assert "mtpc diff: error: unrecognized arguments: --bogus" in err


def test_every_json_result_says_whether_it_is_ok(tmp_path, capsys):
    from tests.fixtures.arch import tiny_arch
    from tests.fixtures.checkpoints import write_hf_checkpoint

    spec = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml"
    ckpt = write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=0, with_mtp=True)
    for argv in (
        ["schema"],
        ["schema", "spec"],
        ["plan", "-q", str(spec), "--against", str(tmp_path / "none")],
        ["inspect", str(ckpt)],
    ):
        assert main([argv[0], "--format", "json", *argv[1:]]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["ok"] is True, argv


def test_a_json_result_without_ok_is_a_bug():
    with pytest.raises(ValueError, match="must say whether it is ok"):
        print_json("schema", {"schemas": []})


def test_check_json_keeps_the_spec_path_of_each_finding_as_compile_does(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    text = (Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml").read_text("utf-8")
    assert "    hidden_size: 64\n" in text
    spec.write_text(text.replace("    hidden_size: 64\n", "    hidden_size: 0\n"), "utf-8")
    assert main(["check", "--format", "json", str(spec)]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["targets"][0]["findings"]
    assert finding["path"] == "source.synthetic.hidden_size" and finding["line"] > 0
    assert main(["compile", "--format", "json", str(spec), "-o", str(tmp_path / "out")]) == 1
    (diagnostic,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert diagnostic["path"] == finding["path"]


def test_the_exit_code_table_is_the_same_in_the_docs_the_help_and_the_code():
    """The README's codes and docs/cli.md's, `mtpc --help`'s table and the code's constants name the same numbers
    (the README names the four a verb decides; docs/cli.md the signals' and the broken pipe's too)."""
    import re
    import signal

    from mtpc.cli.main import EPILOG, EXIT_BROKEN_PIPE
    from mtpc.util.diagnostics import ExitCode

    in_code = {int(c) for c in ExitCode} | {EXIT_BROKEN_PIPE, 128 + signal.SIGINT, 128 + signal.SIGTERM}
    assert in_code == {0, 1, 2, 3, 130, 141, 143}
    table = EPILOG.split("exit codes (every verb):", 1)[1].split("\n\n", 1)[0]
    in_help = {int(n) for n in re.findall(r"(?:^  |; )(\d+)\s", table, re.M)}
    assert in_help == in_code, table
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text(encoding="utf-8")
    paragraph = readme.split("the exit codes are the same everywhere:", 1)[1].split("\n\n", 1)[0]
    assert {int(n) for n in re.findall(r"`(\d+)`", paragraph)} == {int(c) for c in ExitCode}, paragraph
    page = (repo / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    listed = {int(n) for n in re.findall(r"^- `(\d+)`", section, re.M)} | {
        int(n) for n in re.findall(r"^- `(\d+)` on SIGINT \(Ctrl-C\) and `(\d+)`", section, re.M)[0]}
    assert listed == in_code, section
