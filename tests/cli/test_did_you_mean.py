"""A mistyped verb, option, choice or path gets a "did you mean" with the nearest real one, as a spec's keys do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mtpc.cli.main import main
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "argv, says",
    [
        (["compiel", "specs/qwen35-tiny-mtp.yaml"], "did you mean 'compile'?"),
        (["chekc", "specs"], "did you mean 'check'?"),
        (["check", "--fromat", "json", "specs/qwen35-tiny-mtp.yaml"], "did you mean '--format'?"),
        (["diff", "a", "b", "--markdwon"], None),  # nothing near: no guess
        (["check", "--format", "jsno", "specs/qwen35-tiny-mtp.yaml"], "did you mean 'json'?"),
        (["compile", "specs/qwen35-tiny-mpt.yaml"], "did you mean 'specs/qwen35-tiny-mtp.yaml'?"),
        (["plan", "spec/qwen35-tiny-mtp.yaml"], "did you mean 'specs/qwen35-tiny-mtp.yaml'?"),
        (["check", "specs/qwen35-tiny-nohaed.yaml"], "did you mean 'specs/qwen35-tiny-nohead.yaml'?"),
        (["diff", "specs/qwen35-tiny-mtp.yaml", "specs/qwen35-tiny-pagde.yaml"], "did you mean 'specs/qwen35-tiny-paged.yaml'?"),
        (["inspect", "spec"], "did you mean 'specs'?"),
        (["verify", "out", "--spec", "specs/qwen35-tiny-mtp.yml"], None),  # `out` is the first problem, and nothing is near
    ],
)
def test_a_near_miss_is_named(checkout, capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err
    if says is None:
        assert "did you mean" not in err
    else:
        assert says in err, err


def test_the_hint_is_in_the_json_too(checkout, capsys):
    assert main(["compile", "--format", "json", "specs/qwen35-tiny-mpt.yaml"]) == 2
    (diagnostic,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert diagnostic["hint"] == "did you mean 'specs/qwen35-tiny-mtp.yaml'?"
    assert main(["compile", "--fromat", "json", "specs/qwen35-tiny-mtp.yaml"]) == 2
    assert "did you mean '--format'?" in capsys.readouterr().err


def test_a_mistyped_source_path_in_a_spec_is_named_at_its_line(checkout, capsys):
    write_hf_checkpoint(checkout / "checkpoint", tiny_arch(), seed=0)
    (checkout / "spec.yaml").write_text("mtpc: 1\nname: x\nsource: {hf: chekpoint}\n", encoding="utf-8")
    assert main(["check", "spec.yaml"]) == 2
    err = capsys.readouterr().err
    assert "spec.yaml:3:14: error: hf source 'chekpoint' does not exist" in err
    assert "= hint: did you mean 'checkpoint'? the hf source is a folder, relative to the folder of the spec file" in err
