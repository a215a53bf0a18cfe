"""Broken arguments and hostile specs through the CLI (`mtpc.cli.main.main`): exit 1 or 2 with a
message naming what to fix, never an internal error (3), a hang or a runaway allocation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtpc.cli.main import main

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "specs" / "qwen35-tiny-mtp.yaml"
INVALID = REPO / "tests" / "cases" / "invalid"


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_output_folder_is_a_usage_error(empty, tmp_path, monkeypatch, capsys):
    # `-o "$DIR"` with DIR unset wrote to ./out/<name>: an empty DIR is a mistake, not the default.
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "-q", str(TINY), "-o", empty]) == 2
    err = capsys.readouterr().err
    assert "-o/--output is empty" in err and "internal error" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "case, code, message",
    [
        ("alias_bomb", 2, "expands to more than 10000 values"),
        ("too_deep", 2, "nested more than 32 deep"),
        ("huge_number", 1, "block_size must be at most 256"),
        ("not_a_number", 1, "is not a number a spec can hold"),
        ("synthetic_too_big", 1, "more than the 268,435,456 a synthetic model may hold"),
    ],
)
@pytest.mark.parametrize("verb", ["check", "plan", "compile"])
def test_hostile_specs_are_refused_at_their_line(verb, case, code, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    spec = INVALID / f"{case}.yaml"
    argv = [verb, str(spec)] + (["-q", "-o", str(tmp_path / "pkg")] if verb == "compile" else [])
    assert main(argv) == code
    captured = capsys.readouterr()
    said = captured.out + captured.err  # `check` reports findings on stdout
    assert f"{spec}:" in said and message in said and "internal error" not in said
    assert not (tmp_path / "pkg").exists() and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("verify-no-runtime") / "pkg"
    assert main(["compile", "-q", str(TINY), "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize(
    "module, package_name", [("onnxruntime_genai", "onnxruntime-genai"), ("onnxruntime", "onnxruntime")]
)
def test_verify_without_the_runtime_extra_says_what_to_install(module, package_name, package, monkeypatch, capsys):
    # None in sys.modules makes `import module` raise ImportError, as on a machine without the extra.
    monkeypatch.setitem(sys.modules, module, None)
    assert main(["verify", "-q", str(package), "--spec", str(TINY)]) == 2
    err = capsys.readouterr().err
    assert f"runs the package in {package_name}, which cannot be imported" in err
    assert "pip install 'mtpc[runtime]'" in err
    assert "internal error" not in err and "bug in mtpc" not in err
