"""`mtpc diff A B` takes two packages or two specs, as `check` knows them, and refuses anything else (exit 2):
a folder is a package by the same rule `check` applies, so `diff out/pkg emptydir` is a mistake to report,
not "every file removed"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mtpc.cli.main import main
from tests.cli import handmade as hm

REPO = Path(__file__).resolve().parents[2]


def not_packages(root: Path) -> dict[str, Path]:
    """Folders and files that are neither a package nor a spec, each as a user might pass it."""
    empty = root / "empty"
    empty.mkdir()
    yamls = root / "yamls"
    shutil.copytree(REPO / "specs", yamls)  # a folder of specs is not a package
    text = root / "notes.txt"
    text.write_text("not a spec\n", encoding="utf-8")
    return {"empty": empty, "yamls": yamls, "text": text}


@pytest.mark.parametrize("which", ["empty", "yamls", "text"])
@pytest.mark.parametrize("side", ["old", "new"])
def test_diff_refuses_what_check_refuses_with_the_same_words(tmp_path, capsys, which, side):
    package = hm.write_package(tmp_path / "pkg")
    other = not_packages(tmp_path)[which]
    assert main(["check", str(other)]) == 2
    refusal = capsys.readouterr().err.splitlines()[0]  # check's own words for this target
    argv = [str(package), str(other)] if side == "new" else [str(other), str(package)]
    assert main(["diff", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no "55 removed", no severity
    assert captured.err.splitlines()[0] == refusal


def test_two_folders_that_are_not_packages_are_refused_too(tmp_path, capsys):
    found = not_packages(tmp_path)
    assert main(["diff", str(found["empty"]), str(found["yamls"])]) == 2
    assert "not an mtpc package" in capsys.readouterr().err


def test_a_spec_against_a_package_says_which_verb_compares_them(tmp_path, capsys):
    package = hm.write_package(tmp_path / "pkg")
    assert main(["diff", str(REPO / "specs" / "qwen35-tiny-mtp.yaml"), str(package)]) == 2
    assert "mtpc plan SPEC --against DIR" in capsys.readouterr().err


def test_two_specs_that_build_the_same_package_are_no_difference_whatever_their_names_and_comments(tmp_path, capsys):
    """provenance.json records each spec's file name and text; a diff of two specs compares what they build."""
    text = (REPO / "specs" / "qwen35-tiny-nohead.yaml").read_text(encoding="utf-8")
    a = tmp_path / "a.yaml"
    a.write_text(text, encoding="utf-8")
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(text, encoding="utf-8")
    assert main(["diff", str(a), str(renamed)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "no differences",
        "note: the specs' file names differ: provenance.json records each spec, and a diff of two specs leaves that "
        "record out (it compares what they build)",
    ]
    recommented = tmp_path / "recommented.yaml"
    recommented.write_text("# reworded\n" + text.replace("\n#", "\n# (reworded)", 1), encoding="utf-8")
    assert main(["diff", "--format", "json", str(a), str(recommented)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["changes"] == [] and "the specs' texts differ" in doc["notes"][0]
    # What the specs build still differs where it does, provenance's record of the spec left out.
    changed = tmp_path / "changed.yaml"
    changed.write_text(text.replace("head: auto", "head: off"), encoding="utf-8")
    assert main(["diff", "--format", "json", str(a), str(changed)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not any(c["file"] == "provenance.json" and c["path"].startswith("/spec") for c in doc["changes"])
    assert doc["notes"] == []
