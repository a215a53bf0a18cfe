"""`verify` holds the package's provenance.json against the spec it is given: a wrong spec says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtpc.cli.main import main
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "specs" / "qwen35-tiny-mtp.yaml"


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("verify-provenance") / "pkg"
    assert main(["compile", "-q", str(TINY), "-o", str(out)]) == 0
    return out


def _verify(package: Path, spec: Path, capsys, *flags) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", "-q", str(package), "--spec", str(spec), "--new-tokens", "3", *flags])
    return code, capsys.readouterr().out


def test_the_spec_it_was_compiled_from_raises_no_warning(package, capsys):
    code, text = _verify(package, TINY, capsys, "--format", "json")
    doc = json.loads(text)
    assert code == 0 and doc["ok"] and doc["provenance"] == []


def test_a_wrong_spec_is_named_with_what_differs_instead_of_a_bare_mismatch(package, tmp_path, capsys):
    wrong = tmp_path / "seed1.yaml"
    wrong.write_text(TINY.read_text().replace("    seed: 0 ", "    seed: 1 "))
    code, text = _verify(package, wrong, capsys)
    assert code == 1
    assert "warning: the package was compiled from a different spec: qwen35-tiny-mtp.yaml" in text
    assert "not seed1.yaml" in text
    assert "-    seed: 0" in text and "+    seed: 1" in text  # the changed line, comments left out of the excerpt
    assert "synthetic seed 0 recorded, 1 in the spec" in text
    assert text.rstrip().splitlines()[-1].startswith("verify: MISMATCH: the package was compiled from another spec")


def test_a_changed_checkpoint_behind_the_same_spec_is_named(tmp_path, capsys):
    write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=0)
    spec = tmp_path / "hf.yaml"
    spec.write_text("mtpc: 1\nname: hf\nsource:\n  hf: ckpt\ntargets:\n  onnxruntime_genai: {}\n")
    assert main(["compile", "-q", str(spec), "-o", str(tmp_path / "pkg")]) == 0
    write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=1)  # retrained in place: same names and sizes
    code, text = _verify(tmp_path / "pkg", spec, capsys, "--format", "json")
    doc = json.loads(text)
    assert code == 1 and not doc["ok"]
    assert doc["provenance"] == [
        "the spec's source differs from the package's: model.safetensors: same size, different content"
    ]


def test_a_package_without_provenance_says_it_cannot_tell(package, tmp_path, capsys):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(package, old)
    (old / "provenance.json").unlink()
    (old / "manifest.json").unlink()  # an mtpc that wrote no provenance wrote no manifest either
    code, text = _verify(old, TINY, capsys)
    assert code == 0
    assert "warning: the package has no readable provenance.json" in text
    assert text.rstrip().splitlines()[-1] == "verify: ok (but see the provenance warnings above)"


def test_tokens_that_differ_because_the_checkpoint_changed_say_so_not_that_it_is_the_precision(tmp_path, capsys):
    """An int4 package (whose greedy tokens may differ from the float reference within tolerance) verified after its
    checkpoint was retrained in place: the divergence is the checkpoint's, and the note says that."""
    write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=0)
    spec = tmp_path / "hf.yaml"
    spec.write_text("mtpc: 1\nname: hf\nsource:\n  hf: ckpt\nquantization: {default: {bits: 4}}\n"
                    "targets:\n  onnxruntime_genai: {}\n")
    assert main(["compile", "-q", str(spec), "-o", str(tmp_path / "pkg")]) == 0
    code, text = _verify(tmp_path / "pkg", spec, capsys, "--format", "json")
    doc = json.loads(text)
    assert code == 0 and not [n for n in doc["notes"] if n.startswith("greedy tokens differ")]  # as built: they agree
    write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=1)
    code, text = _verify(tmp_path / "pkg", spec, capsys, "--format", "json")
    doc = json.loads(text)
    assert code == 1
    (note,) = [n for n in doc["notes"] if n.startswith("greedy tokens differ")]
    assert note.startswith("greedy tokens differ from the reference (the package was not built from this spec and "
                           "checkpoint: see the provenance warnings): ")
    assert "precision" not in note
