"""`mtpc tune` on input it cannot use: one clear error, exit 2, no traceback, nothing written.

Each case runs the verb in-process and checks what it said and that neither the
package nor the working folder gained a file (tune writes nothing, whatever happens).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mtpc.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"


def tree(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The shipped tiny spec's package: its fitted head and the synthetic tokenizer."""
    out = tmp_path_factory.mktemp("tune-errors") / "tiny"
    assert main(["compile", "-q", str(SPECS / "qwen35-tiny-mtp.yaml"), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def paged(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tune-errors") / "paged"
    assert main(["compile", "-q", str(SPECS / "qwen35-tiny-paged.yaml"), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def cuda(tmp_path_factory) -> Path:
    """The tiny spec built dense for CUDA: a package onnxruntime-genai's CPU build cannot run."""
    folder = tmp_path_factory.mktemp("tune-errors")
    text = (SPECS / "qwen35-tiny-mtp.yaml").read_text("utf-8")
    assert text.count("execution_provider: cpu") == 1
    (folder / "cuda.yaml").write_text(text.replace("execution_provider: cpu", "execution_provider: cuda"), encoding="utf-8")
    assert main(["compile", "-q", str(folder / "cuda.yaml"), "-o", str(folder / "cuda")]) == 0
    return folder / "cuda"


def refused(argv: list[str], capsys, *watched: Path) -> str:
    """Runs `mtpc tune ARGV`; asserts exit 2, no traceback and no new file in `watched`; returns stderr."""
    before = [tree(folder) for folder in watched]
    assert main(["tune", "-q", *argv]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "internal error" not in captured.err
    assert captured.out == ""
    assert [tree(folder) for folder in watched] == before
    return captured.err


def test_a_missing_package(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = refused([str(tmp_path / "nowhere")], capsys, tmp_path)
    assert "package" in err and "does not exist" in err


def test_a_folder_that_is_no_package(tmp_path, capsys):
    err = refused([str(tmp_path)], capsys, tmp_path)
    assert "holds no genai_config.json" in err


def test_the_heads_own_folder(tiny, capsys):
    err = refused([str(tiny / "mtp")], capsys, tiny)
    assert "the MTP head's folder; pass the package root" in err


def test_a_package_without_a_head(nohead, capsys):
    err = refused([str(nohead)], capsys, nohead)
    assert "has no MTP head" in err and "og.Generator" in err


def test_a_paged_package_cannot_run_here(paged, capsys):
    err = refused([str(paged)], capsys, paged)
    assert "paged package" in err and "cannot run it here" in err


def test_a_package_for_a_provider_this_runtime_lacks(cuda, capsys):
    import onnxruntime_genai as og

    if og.is_cuda_available():  # a CUDA build runs it: nothing to refuse
        pytest.skip("this onnxruntime-genai has CUDA")
    err = refused([str(cuda)], capsys, cuda)
    assert "runs on the cuda execution provider, which this onnxruntime-genai does not have" in err


def test_more_drafts_than_the_state_window_holds(tiny, capsys):
    # The tiny spec's window is 5 (max_draft_tokens 4): the runtime would draft 4 where tune priced 5.
    err = refused([str(tiny), "--max-draft", "5"], capsys, tiny)
    assert "its state window holds 5 tokens, so onnxruntime-genai drafts at most 4 a step" in err
    assert "max_draft_tokens: 5" in err


def test_a_prompts_file_that_does_not_exist(tiny, tmp_path, capsys):
    err = refused([str(tiny), "--prompts", str(tmp_path / "missing.txt")], capsys, tiny, tmp_path)
    assert "prompts file" in err and "does not exist" in err


def test_a_prompts_file_that_is_a_folder(tiny, tmp_path, capsys):
    err = refused([str(tiny), "--prompts", str(tmp_path)], capsys, tiny, tmp_path)
    assert "is a directory" in err


def test_a_prompts_file_that_is_not_text(tiny, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(b"a fine first line\n\xff\xfe broken second line\n")
    err = refused([str(tiny), "--prompts", str(prompts)], capsys, tiny, tmp_path)
    assert f"{prompts}:2:1: error: prompts file is not UTF-8 text" in err


@pytest.mark.parametrize("text", ["", "\n\n   \n\t\n"])
def test_an_empty_prompts_file(tiny, tmp_path, capsys, text):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(text, encoding="utf-8")
    err = refused([str(tiny), "--prompts", str(prompts)], capsys, tiny, tmp_path)
    assert "holds no prompt" in err


def test_a_prompt_longer_than_the_context_is_named_by_its_line(tiny, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("short\n\n" + "x" * 600 + "\n", encoding="utf-8")  # one token a byte; the context is 512
    err = refused([str(tiny), "--prompts", str(prompts)], capsys, tiny, tmp_path)
    assert f"{prompts}:3: 600 tokens" in err and "context length (512)" in err


@pytest.mark.parametrize("module, package_name", [("onnxruntime_genai", "onnxruntime-genai"), ("onnxruntime", "onnxruntime")])
def test_without_the_runtime_extra_it_says_what_to_install(tiny, capsys, monkeypatch, module, package_name):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError, as without the extra
    err = refused([str(tiny)], capsys, tiny)
    assert f"mtpc tune runs the package in {package_name}, which cannot be imported" in err
    assert "pip install 'mtpc[runtime]'" in err


def test_errors_in_json_carry_the_exit_code(tmp_path, capsys):
    assert main(["tune", str(tmp_path / "nowhere"), "--format", "json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "tune" and doc["ok"] is False and doc["exit_code"] == 2
    assert "does not exist" in doc["diagnostics"][0]["message"]


@pytest.mark.parametrize("option, message", [
    (["--max-draft", "0"], "argument --max-draft: must be from 1 to 16, got 0"),
    (["--max-draft", "17"], "argument --max-draft: must be from 1 to 16, got 17"),
    (["--new-tokens", "3"], "argument --new-tokens: must be at least 8, got 3"),
    (["--threads", "none"], "argument --threads: 'none' is not a whole number"),
])
def test_bad_options_are_usage_errors(tiny, capsys, option, message):
    assert main(["tune", str(tiny), *option]) == 2
    assert message in capsys.readouterr().err
