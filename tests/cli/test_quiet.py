"""`-q`: nothing on stderr but errors, for every verb, whatever the outcome (findings go to stdout).

Run as real processes, so whatever reaches file descriptor 2 counts (a library's warning too)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtpc.cli.main import main
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "specs" / "qwen35-tiny-mtp.yaml"
NOHEAD = REPO / "specs" / "qwen35-tiny-nohead.yaml"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("quiet")
    for name, spec in (("pkg", TINY), ("nohead", NOHEAD)):
        assert main(["compile", "-q", str(spec), "-o", str(root / name)]) == 0
    # onnxruntime-genai alone, where a package may lack a tokenizer (a warning; onnx-genai's would be an error)
    ort_only = TINY.read_text(encoding="utf-8")
    (root / "ort-only.yaml").write_text(ort_only[:ort_only.index("\ntargets:")] + "\ntargets:\n  onnxruntime_genai: {}\n",
                                        encoding="utf-8")
    assert main(["compile", "-q", str(root / "ort-only.yaml"), "-o", str(root / "no-tokenizer")]) == 0
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (root / "no-tokenizer" / name).unlink()
    (root / "no-tokenizer" / "manifest.json").unlink()  # as an mtpc from before manifests wrote it: a warning
    (root / "offline.yaml").write_text("mtpc: 1\nname: x\nsource: {hf: not-here}\n", encoding="utf-8")
    write_hf_checkpoint(root / "ckpt", tiny_arch(), seed=0)
    return root


CASES = {
    "compile": (["compile", str(NOHEAD), "-o", "{work}/again"], 0),
    "check a package": (["check", "{work}/pkg"], 0),
    "check a spec": (["check", str(TINY)], 0),
    "check offline (a note)": (["check", "--offline", "{work}/offline.yaml"], 0),
    "check with a warning": (["check", "{work}/no-tokenizer"], 0),
    "check with findings": (["check", "{work}/pkg", str(REPO / "tests" / "cases" / "invalid" / "bad_enum.yaml")], 1),
    "plan": (["plan", str(TINY), "--against", "{work}/pkg"], 0),
    "diff": (["diff", "{work}/pkg", "{work}/nohead"], 1),
    "inspect": (["inspect", "{work}/ckpt"], 0),
    "schema": (["schema", "spec"], 0),
    "verify": (["verify", "{work}/pkg", "--spec", str(TINY), "--new-tokens", "2"], 0),
    "tune": (["tune", "{work}/pkg", "--new-tokens", "8", "--sweeps", "3", "--max-draft", "1"], 0),
}


def test_every_verb_is_silent_on_stderr_with_q(work):
    from mtpc.cli.main import VERB_MODULES

    assert {m.removesuffix("_cmd") for m in VERB_MODULES} == {name.split()[0] for name in CASES}  # every verb
    procs = {
        name: subprocess.Popen([sys.executable, "-m", "mtpc", *[a.format(work=work) for a in argv], "-q"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=work)
        for name, (argv, _) in CASES.items()
    }
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert (proc.returncode, err) == (CASES[name][1], ""), name


def test_q_keeps_the_errors(work, capsys):
    assert main(["check", "-q", str(work / "pkg"), str(work / "missing")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: '{work / 'missing'}' does not exist"]


def test_q_silences_the_note_of_a_recovered_write(work, capsys, monkeypatch):
    """What an interrupted write left is still cleaned up; -q only keeps the note about it off stderr."""
    import json
    import os

    folder = work / "recover"
    shutil.copytree(work / "pkg", folder / "pkg")
    leftover = folder / ".pkg.mtpc-0123abcd.tmp"
    leftover.mkdir()
    (folder / ".pkg.mtpc-0123abcd.writing").write_text(json.dumps({"mtpc_write": 1, "pid": 2**22 + 1, "host": os.uname().nodename, "start": None}))
    monkeypatch.chdir(folder)
    assert main(["check", "-q", "pkg"]) == 0
    assert capsys.readouterr().err == ""
    assert sorted(os.listdir(folder)) == ["pkg"]
