"""`mtpc verify`: what it refuses up front (usage, exit 2) and how it reports a runtime that refuses a package."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mtpc.cli.main import main
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint

TINY = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml"


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("verify-args") / "pkg"
    assert main(["compile", "-q", str(TINY), "-o", str(out)]) == 0
    return out


def verify(*args: str) -> int:
    return main(["verify", "-q", *args, "--spec", str(TINY)])


def test_an_empty_folder_is_not_a_package(tmp_path, capsys):
    assert verify(str(tmp_path)) == 2
    captured = capsys.readouterr()
    assert "not an mtpc package" in captured.err and "verify: ok" not in captured.out


def test_a_checkpoint_folder_is_not_a_package(tmp_path, capsys):
    ckpt = write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=0, with_mtp=True)
    assert verify(str(ckpt)) == 2
    assert "not an mtpc package" in capsys.readouterr().err


def test_the_head_folder_is_refused_with_a_pointer_to_the_root(package, capsys):
    # The folder whose genai_config.json feeds `hidden_states` into its decoder is the head's, not the package.
    (head_config,) = [p for p in package.rglob("genai_config.json") if p.parent != package]
    assert "hidden_states" in json.loads(head_config.read_text("utf-8"))["model"]["decoder"]["inputs"]
    assert verify(str(head_config.parent)) == 2
    err = capsys.readouterr().err
    assert "this is the MTP head's folder; pass the package root" in err
    assert str(package.resolve()) in err


@pytest.mark.parametrize(
    "option, message",
    [
        (["--new-tokens", "0"], "argument --new-tokens: must be at least 1, got 0"),
        (["--new-tokens", "-3"], "argument --new-tokens: must be at least 1, got -3"),
        (["--new-tokens", "many"], "argument --new-tokens: 'many' is not a whole number"),
        (["--draft-tokens", "0"], "argument --draft-tokens: must be from 1 to 16, got 0"),
        (["--draft-tokens", "50"], "argument --draft-tokens: must be from 1 to 16, got 50"),
        (["--atol", "-1"], "argument --atol: must be a finite number >= 0, got -1"),
        (["--atol", "nan"], "argument --atol: must be a finite number >= 0, got nan"),
        (["--prompt", ""], "argument --prompt: is empty"),
        (["--prompt", "1,x"], "argument --prompt: '1,x' is not a comma-separated list of token ids"),
        (["--prompt", "1,-2"], "argument --prompt: token ids cannot be negative, got -2"),
    ],
)
def test_option_mistakes_are_usage_errors(package, capsys, option, message):
    assert verify(str(package), *option) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "usage: mtpc verify" in captured.err and "internal error" not in captured.err
    assert captured.out == ""


def test_more_tokens_than_the_context_holds_is_a_usage_error(package, capsys):
    context = json.loads((package / "genai_config.json").read_text("utf-8"))["model"]["context_length"]
    prompt_length = 6  # the default prompt
    assert verify(str(package), "--new-tokens", str(context - prompt_length + 1)) == 2
    err = capsys.readouterr().err
    assert f"exceeds the package's context length ({context})" in err and "internal error" not in err
    assert f"--new-tokens {context - prompt_length} or less" in err


def test_the_widest_draft_onnxruntime_genai_accepts_runs(package, capsys):
    assert verify(str(package), "--draft-tokens", "16", "--new-tokens", "3") == 0
    assert capsys.readouterr().out.rstrip().endswith("verify: ok")


def test_a_runtime_that_refuses_the_package_is_a_failed_check(package, tmp_path, monkeypatch, capfd):
    """A truncated weight file: `mtpc check` reports it first; were it missed, onnxruntime's refusal is a finding."""
    broken = tmp_path / "pkg"
    shutil.copytree(package, broken)
    data = broken / "model.onnx.data"
    os.truncate(data, data.stat().st_size // 2)
    monkeypatch.setattr("mtpc.checks.check_package", lambda root: [])
    assert verify(str(broken)) == 1
    captured = capfd.readouterr()  # file descriptors: onnxruntime logs from C++
    lines = captured.out.splitlines()
    assert lines[0].startswith("FAIL runtime: onnxruntime could not load model.onnx: ")
    assert "out of bounds" in lines[0] and "[ONNXRuntimeError]" not in lines[0]
    assert lines[-1] == "verify: FAILED (a runtime refused the package)"
    assert captured.err == "" and "internal error" not in captured.out


def test_a_runtime_refusal_in_json(package, tmp_path, monkeypatch, capsys):
    broken = tmp_path / "pkg"
    shutil.copytree(package, broken)
    os.truncate(broken / "model.onnx.data", 100)
    monkeypatch.setattr("mtpc.checks.check_package", lambda root: [])
    assert main(["verify", "--format", "json", str(broken), "--spec", str(TINY)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert [c["check"] for c in doc["checks"]] == ["runtime"]
    assert doc["checks"][0]["detail"].startswith("onnxruntime could not load model.onnx: ")
