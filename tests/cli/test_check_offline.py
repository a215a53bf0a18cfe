"""`mtpc check --offline`: a CI gate for specs whose checkpoint is not on the machine.

A spec with an hf or gguf source is checked in full when the checkpoint is there; when it
is not, plain `check` cannot check it (exit 2, with a hint naming --offline) and
`check --offline` checks all that needs no weights: the schema, the cross-field rules and
the targets (each runtime profile's limits). A synthetic spec needs no checkpoint and is
checked in full either way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from mtpc.cli.main import main
from tests.fixtures.checkpoints import tiny_arch, write_hf_checkpoint

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "specs").glob("*.yaml"))

HF_SPEC = """\
# yaml-language-server: $schema=https://example.invalid/spec.schema.json
mtpc: 1
name: offline-hf
source:
  hf: ckpt
quantization:
  default: {{bits: 4, block_size: {block_size}}}
  overrides:
    - {{match: "{match}", bits: null}}
targets:
  onnxruntime_genai: {{execution_provider: cpu, attention: {attention}}}
"""


def write_spec(folder: Path, name="spec.yaml", *, block_size=32, match="lm_head.weight", attention="dense") -> Path:
    path = folder / name
    path.write_text(HF_SPEC.format(block_size=block_size, match=match, attention=attention), encoding="utf-8")
    return path


def check(capsys, *argv) -> tuple[int, str, str]:
    code = main(["check", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _synthetic(spec: Path) -> bool:
    return "synthetic" in yaml.safe_load(spec.read_text(encoding="utf-8"))["source"]


@pytest.mark.parametrize("spec", SHIPPED, ids=[s.name for s in SHIPPED])
def test_shipped_specs_pass_offline_anywhere(spec, tmp_path, capsys, monkeypatch):
    """Copied away from the checkout (nothing beside them): a synthetic spec is checked in full, with no note; one
    that names a checkpoint (models/, beside specs/) passes with the note that it was checked without it."""
    copy = tmp_path / spec.name
    shutil.copy(spec, copy)
    monkeypatch.chdir(tmp_path)
    code, out, err = check(capsys, "--offline", copy.name)
    assert (code, out) == (0, ""), err
    if _synthetic(spec):
        assert "mtpc check: ok (1 target)" in err and "offline" not in err
    else:
        assert "note: checked offline: the hf source" in err and "1 checked offline, without the checkpoint" in err


@pytest.fixture(scope="module")
def with_checkpoint(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("offline")
    write_hf_checkpoint(folder / "ckpt", tiny_arch(), seed=0, with_mtp=True)
    return folder


def test_with_its_checkpoint_the_spec_is_checked_in_full(with_checkpoint, capsys):
    spec = write_spec(with_checkpoint)
    code, out, err = check(capsys, spec)
    assert (code, out) == (0, ""), err
    # An override that matches no weight of this checkpoint is found only with the checkpoint.
    typo = write_spec(with_checkpoint, "typo.yaml", match="lm_haed.weight")
    code, out, err = check(capsys, typo)
    assert code == 1 and "override 'lm_haed.weight' matches no weight of this model" in out
    code, out, err = check(capsys, "--offline", typo)
    assert code == 0 and out == ""
    assert "note: checked offline: the hf source 'ckpt' was not opened" in err


def test_without_its_checkpoint_plain_check_says_to_use_offline(tmp_path, capsys):
    spec = write_spec(tmp_path)  # no ckpt/ beside it: the checkpoint was moved away
    code, out, err = check(capsys, spec)
    assert code == 2 and out == ""
    assert f"{spec}:5:7: error: hf source 'ckpt' does not exist" in err
    assert "run: mtpc check --offline" in err


def test_offline_without_the_checkpoint_exits_0_with_a_note(tmp_path, capsys):
    spec = write_spec(tmp_path)
    code, out, err = check(capsys, "--offline", spec)
    assert (code, out) == (0, "")
    assert f"{spec}:5:7: note: checked offline: the hf source 'ckpt' was not opened" in err
    assert "mtpc check: ok (1 target; 1 checked offline, without the checkpoint)" in err
    code, out, _ = check(capsys, "--offline", "--format", "github", spec)
    assert code == 0 and out.startswith(f"::notice file={spec},line=5,col=7,title=mtpc check::checked offline")
    code, out, _ = check(capsys, "--offline", "--format", "json", spec)
    doc = json.loads(out)
    assert doc["ok"] is True and doc["targets"][0]["findings"][0]["severity"] == "note"


def test_a_gguf_source_that_is_absent_is_checked_offline_too(tmp_path, capsys):
    spec = tmp_path / "gguf.yaml"
    spec.write_text(HF_SPEC.format(block_size=32, match="lm_head.weight", attention="dense").replace("hf: ckpt", "gguf: model.gguf"))
    code, _, err = check(capsys, spec)
    assert code == 2 and "gguf source 'model.gguf' does not exist" in err
    code, _, err = check(capsys, "--offline", spec)
    assert code == 0 and "the gguf source 'model.gguf' was not opened" in err


def test_offline_a_schema_error_still_fails(tmp_path, capsys):
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace("attention: dense", "attention: dense, attnetion: paged"))
    code, out, _ = check(capsys, "--offline", spec)
    assert code == 1
    assert "attnetion" in out and "did you mean 'attention'" in out


@pytest.mark.parametrize(
    "edit, says",
    [
        ({"block_size": 48}, "quantization.default.block_size must be a power of two"),  # a cross-field rule
        ({"attention": "paged"}, "paged attention needs execution_provider 'cuda', not 'cpu'"),  # the runtime profile's limit
    ],
)
def test_offline_cross_field_and_target_rules_still_fail(tmp_path, capsys, edit, says):
    spec = write_spec(tmp_path, **edit)
    code, out, _ = check(capsys, "--offline", "--format", "github", spec)
    assert code == 1
    assert out.startswith(f"::error file={spec},line=") and says in out


def test_offline_mixed_targets_are_all_reported(tmp_path, capsys):
    good = write_spec(tmp_path, "good.yaml")
    bad = write_spec(tmp_path, "bad.yaml", block_size=48)
    code, out, err = check(capsys, "--offline", good, bad, SHIPPED[0])
    assert code == 1
    assert out.count("error:") == 1 and str(bad) in out
    assert "1 finding in 3 targets; 1 checked offline, without the checkpoint" in err
