"""The exit-code table, help, JSON envelopes and internal errors, through the real entry points."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mtpc.cli import main as cli_main
from mtpc.cli.main import main


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

    monkeypatch.setattr("mtpc.cli.schema_cmd.schema_names", broken)
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


def test_a_closed_pipe_is_not_an_error(tmp_path):
    """`mtpc schema spec | head -0`: the reader leaves early; mtpc exits quietly."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "mtpc", "schema", "spec"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before mtpc has printed anything (mtpc is still importing)
    stderr = proc.stderr.read().decode()
    assert proc.wait() == 0
    assert "error" not in stderr.lower() and "Traceback" not in stderr
