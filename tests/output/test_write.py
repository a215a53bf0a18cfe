"""The package writer: what it may replace, that a failure leaves the destination
as it was, the package folder's permissions, and how write errors read."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mtpc.output import write as output
from mtpc.cli.main import main
from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.emit.artifact import Artifact
from mtpc.output.write import write_package
from tests.fixtures.checkpoints import tiny_arch, write_hf_checkpoint

TINY = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-nohead.yaml"
CARD = "# old\n\nA runtime package compiled by mtpc from a qwen35 checkpoint (synthetic source), text only.\n"
NEW = [Artifact("README.md", CARD.encode()), Artifact("sub/b.bin", b"\x01\x02")]


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def written(files: dict[str, bytes]) -> dict[str, bytes]:
    """What a write of `files` leaves: them, and manifest.json listing each with its size and sha256 (by hashlib)."""
    doc = {"format_version": 1, "files": [
        {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in sorted(files.items())
    ]}
    return {**files, "manifest.json": (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()}


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def refusal(call) -> str:
    with pytest.raises(MtpcError) as info:
        call()
    assert info.value.exit_code == ExitCode.USAGE
    return str(info.value)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_absent_and_empty_destinations_are_written(in_tmp):
    write_package(NEW, "a/pkg")
    (in_tmp / "empty").mkdir()
    write_package(NEW, "empty")
    expected = written({"README.md": CARD.encode(), "sub/b.bin": b"\x01\x02"})
    assert tree(in_tmp / "a" / "pkg") == expected and tree(in_tmp / "empty") == expected
    assert sorted(p.name for p in in_tmp.iterdir()) == ["a", "empty"]


def test_an_earlier_package_is_replaced_whole(in_tmp):
    make_tree(in_tmp / "pkg", {"README.md": CARD, "stale.onnx": "old graph"})
    write_package([Artifact("README.md", CARD.encode()), Artifact("new.txt", b"new")], "pkg")
    assert tree(in_tmp / "pkg") == written({"README.md": CARD.encode(), "new.txt": b"new"})
    assert sorted(p.name for p in in_tmp.iterdir()) == ["pkg"]


@pytest.mark.parametrize(
    "files",
    [
        {"main.py": "print('my project')"},
        {"README.md": "# my project\n\nNot compiled by anything.\n"},
        {"config.json": "{}", "model.safetensors": "weights"},
    ],
    ids=["project", "other-readme", "checkpoint"],
)
def test_a_folder_that_is_no_package_is_kept_unless_forced(in_tmp, files):
    make_tree(in_tmp / "out" / "x", files)
    message = refusal(lambda: write_package(NEW, "out/x"))
    assert message == (
        "error: out/x exists and is not an mtpc package; refusing to replace it (choose another -o, or --force)"
    )
    assert tree(in_tmp / "out" / "x") == {k: v.encode() for k, v in files.items()}
    assert sorted(p.name for p in (in_tmp / "out").iterdir()) == ["x"]
    write_package(NEW, "out/x", force=True)
    assert tree(in_tmp / "out" / "x") == written({"README.md": CARD.encode(), "sub/b.bin": b"\x01\x02"})


def test_a_file_is_never_replaced(in_tmp):
    (in_tmp / "notes.txt").write_text("keep me", encoding="utf-8")
    for force in (False, True):
        message = refusal(lambda: write_package(NEW, "notes.txt", force=force))
        assert "notes.txt exists and is not a directory; refusing to replace it" in message
    assert sorted(p.name for p in in_tmp.iterdir()) == ["notes.txt"]
    assert (in_tmp / "notes.txt").read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize("destination", ["work/specs", "work"])
def test_the_folder_holding_a_protected_path_is_never_replaced(in_tmp, destination):
    make_tree(in_tmp / "work", {"specs/a.yaml": "mtpc: 1", "README.md": CARD})
    before = tree(in_tmp)
    message = refusal(lambda: write_package(NEW, destination, force=True, protected=[("spec", "work/specs/a.yaml")]))
    assert f"{destination} holds the spec work/specs/a.yaml; refusing to replace it" in message
    assert tree(in_tmp) == before


def test_a_failed_final_rename_puts_the_old_package_back(in_tmp, monkeypatch):
    make_tree(in_tmp / "pkg", {"README.md": CARD, "model.onnx": "old graph"})
    before = tree(in_tmp / "pkg")
    real_rename = os.rename

    def rename(src, dst):
        if os.fspath(src).endswith(".tmp"):  # the new package, going into place
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    message = refusal(lambda: write_package(NEW, "pkg"))
    assert message == "error: cannot write output directory pkg: No space left on device"
    assert tree(in_tmp / "pkg") == before
    assert sorted(p.name for p in in_tmp.iterdir()) == ["pkg"]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_package_folder_follows_the_umask_like_its_subfolders(in_tmp, umask):
    previous = os.umask(umask)
    try:
        write_package(NEW, "pkg")
    finally:
        os.umask(previous)
    expected = 0o777 & ~umask
    assert (in_tmp / "pkg").stat().st_mode & 0o777 == expected
    assert (in_tmp / "pkg" / "sub").stat().st_mode & 0o777 == expected


def test_a_write_error_names_the_output_folder_not_the_temporary_one(in_tmp):
    # "a" is written as a folder first, so opening it as a file fails like any unwritable path would.
    clash = [Artifact("a/inner.txt", b"x"), Artifact("a", b"y")]
    message = refusal(lambda: write_package(clash, "out/pkg"))
    assert message == "error: cannot write output directory out/pkg: Is a directory"
    assert list((in_tmp / "out").iterdir()) == []


def test_a_full_disk_mid_file_leaves_the_old_package_and_names_the_output_folder(in_tmp, monkeypatch):
    make_tree(in_tmp / "pkg", {"README.md": CARD, "model.onnx": "old graph"})
    before = tree(in_tmp / "pkg")

    class FullDisk:
        def __init__(self, file):
            self.file = file

        def write(self, chunk):
            raise OSError(28, "No space left on device")

        def close(self):
            self.file.close()

    def full_disk_open(path, mode="r"):
        return FullDisk(open(path, mode)) if "w" in mode else open(path, mode)

    monkeypatch.setattr(output, "open", full_disk_open, raising=False)
    message = refusal(lambda: write_package(NEW, "pkg"))
    assert message == "error: cannot write output directory pkg: No space left on device"
    assert tree(in_tmp / "pkg") == before
    assert sorted(p.name for p in in_tmp.iterdir()) == ["pkg"]


def test_a_failure_reading_the_source_is_not_reported_as_a_write_error(in_tmp):
    def chunks():
        yield b"start"
        raise OSError(5, "Input/output error", "/models/ckpt/model.safetensors")

    with pytest.raises(OSError) as info:
        write_package([Artifact("model.onnx.data", chunks=chunks)], "pkg")
    assert not isinstance(info.value, MtpcError) and info.value.filename == "/models/ckpt/model.safetensors"
    assert list(in_tmp.iterdir()) == []


def test_recognises_the_card_mtpc_writes(in_tmp, capsys):
    # Ties output.CARD_SIGNATURE to emit/model_card.py: a real package must be replaceable without --force.
    assert main(["compile", "-q", str(TINY), "-o", "pkg"]) == 0
    assert output.is_package(in_tmp / "pkg")
    (in_tmp / "pkg" / "leftover.txt").write_text("from an older compile", encoding="utf-8")
    assert main(["compile", "-q", str(TINY), "-o", "pkg"]) == 0
    assert not (in_tmp / "pkg" / "leftover.txt").exists()


def test_compile_refuses_before_building_and_force_overrides(in_tmp, capsys):
    make_tree(in_tmp / "proj", {"main.py": "print('my project')"})
    assert main(["compile", str(TINY), "-o", "proj"]) == 2
    err = capsys.readouterr().err
    assert "proj exists and is not an mtpc package; refusing to replace it (choose another -o, or --force)" in err
    assert "emitting" not in err  # refused before the build
    assert tree(in_tmp / "proj") == {"main.py": b"print('my project')"}
    assert main(["compile", "-q", str(TINY), "-o", "proj", "--force"]) == 0
    assert output.is_package(in_tmp / "proj") and not (in_tmp / "proj" / "main.py").exists()


def test_compile_never_replaces_the_source_checkpoint_folder(in_tmp, capsys):
    write_hf_checkpoint(in_tmp / "ckpt", tiny_arch(), tokenizer=True)  # both targets: onnx-genai needs it
    spec = in_tmp / "specs" / "hf.yaml"
    spec.parent.mkdir()
    spec.write_text("mtpc: 1\nname: hf\nsource: {hf: ../ckpt}\n", encoding="utf-8")
    before = tree(in_tmp)
    for destination, holds in (("ckpt", "source checkpoint"), ("specs", "spec"), (".", "spec")):
        assert main(["compile", "-q", str(spec), "-o", destination, "--force"]) == 2
        err = capsys.readouterr().err
        assert f"error: {destination} holds the {holds} " in err and "; refusing to replace it (choose another -o)" in err
    assert tree(in_tmp) == before


def test_plan_refuses_what_compile_refuses_whatever_the_flags_in_compiles_words(in_tmp, capsys):
    """A folder holding the checkpoint or the spec, or a file: compile refuses it even with --force, so plan says
    exactly that (exit 2, the same line) instead of listing its files as "(remove)"."""
    write_hf_checkpoint(in_tmp / "ckpt", tiny_arch())
    spec = in_tmp / "specs" / "hf.yaml"
    spec.parent.mkdir()
    # onnxruntime-genai alone: the test checkpoint ships no tokenizer.json, which an onnx-genai target needs
    spec.write_text("mtpc: 1\nname: hf\nsource: {hf: ../ckpt}\ntargets:\n  onnxruntime_genai: {}\n", encoding="utf-8")
    (in_tmp / "a_file").write_text("x", encoding="utf-8")
    before = tree(in_tmp)
    for destination in ("ckpt", "specs", ".", "a_file"):
        assert main(["compile", "-q", str(spec), "-o", destination, "--force"]) == 2
        compile_says = capsys.readouterr().err.splitlines()
        assert main(["plan", "-q", str(spec), "--against", destination]) == 2, destination
        plan = capsys.readouterr()
        assert plan.err.splitlines() == compile_says and "(remove)" not in plan.out and plan.out == "", destination
        assert main(["plan", "-q", "--format", "json", str(spec), "--against", destination]) == 2
        doc = json.loads(capsys.readouterr().out)
        assert [d["message"] for d in doc["diagnostics"]] == [line.removeprefix("error: ") for line in compile_says]
    assert tree(in_tmp) == before


def test_plan_notes_a_refusal_that_force_would_lift_and_lists_the_files_as_force_would_change_them(in_tmp, capsys):
    (in_tmp / "foreign").mkdir()
    (in_tmp / "foreign" / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["plan", "-q", str(TINY), "--against", "foreign"]) == 0
    out = capsys.readouterr().out
    assert "note: compile -o foreign would refuse without --force: foreign exists and is not an mtpc package" in out
    assert "  - notes.txt  (remove)" in out  # what `compile --force` would do
    assert main(["plan", "--format", "json", str(TINY), "--against", "foreign"]) == 0
    assert json.loads(capsys.readouterr().out)["compile_would_refuse"]["force_helps"] is True
    assert main(["compile", "-q", str(TINY), "-o", "foreign", "--force"]) == 0
    assert not (in_tmp / "foreign" / "notes.txt").exists()


# What an interrupted write leaves, and what a later run does about it (the real kills are in test_interrupted_runs.py).


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()  # reaped: its pid names no process now
    return proc.pid


def leave_write(root: Path, token: str, state: str, *, pid: int, host: str | None = None, tmp=True, old=False):
    """The journal (and folders) a write to root/pkg leaves when its process `pid` stops at `state`."""
    doc = {"mtpc_write": 1, "pid": pid, "host": host or socket.gethostname(), "start": None}
    (root / f".pkg.mtpc-{token}.{state}").write_text(json.dumps(doc), encoding="utf-8")
    if tmp:
        make_tree(root / f".pkg.mtpc-{token}.tmp", {"README.md": CARD, "model.onnx": "new graph"})
    if old:
        make_tree(root / f".pkg.mtpc-{token}.old", {"README.md": CARD, "model.onnx": "old graph"})


def test_a_dead_writers_incomplete_package_is_removed_and_the_output_kept(in_tmp):
    make_tree(in_tmp / "pkg", {"README.md": CARD, "model.onnx": "old graph"})
    leave_write(in_tmp, "0123abcd", "writing", pid=dead_pid())
    notes = []
    output.recover("pkg", note=notes.append)
    assert notes == ["removed the incomplete package of an interrupted compile of pkg; pkg is as it was"]
    assert sorted(p.name for p in in_tmp.iterdir()) == ["pkg"]
    assert tree(in_tmp / "pkg")["model.onnx"] == b"old graph"


def test_a_dead_writers_swap_is_completed(in_tmp):
    leave_write(in_tmp, "0123abcd", "swapping", pid=dead_pid(), old=True)  # killed between the two renames
    notes = []
    output.recover("pkg", note=notes.append)
    assert notes == ["completed the interrupted replacement of pkg: it now holds the new package"]
    assert sorted(p.name for p in in_tmp.iterdir()) == ["pkg"]
    assert tree(in_tmp / "pkg")["model.onnx"] == b"new graph"


@pytest.mark.parametrize("whose", ["a live process", "another host", "no journal"])
def test_what_a_live_or_unknown_writer_left_is_never_touched(in_tmp, whose):
    if whose == "no journal":
        make_tree(in_tmp / ".pkg.mtpc-0123abcd.tmp", {"mine.txt": "not mtpc's"})
    else:
        pid, host = (os.getpid(), None) if whose == "a live process" else (dead_pid(), "elsewhere.example")
        leave_write(in_tmp, "0123abcd", "swapping", pid=pid, host=host, old=True)
    before = tree(in_tmp)
    notes = []
    output.recover("pkg", note=notes.append)
    write_package(NEW, "pkg")  # a write beside them does not touch them either
    assert notes == []
    after = tree(in_tmp)
    assert {k: v for k, v in after.items() if not k.startswith("pkg/")} == before


def test_what_an_older_mtpc_left_is_restored_or_pointed_at(in_tmp):
    make_tree(in_tmp / ".pkg.old-89abcdef", {"README.md": CARD, "model.onnx": "old graph"})
    make_tree(in_tmp / ".pkg.tmp-01234567", {"README.md": CARD})
    notes = []
    output.recover("pkg", note=notes.append)
    assert notes == [
        "restored the earlier package at pkg from .pkg.old-89abcdef, left by an interrupted compile",
        f"{in_tmp.resolve() / '.pkg.tmp-01234567'} looks like the folder of a compile an older mtpc did not finish; "
        "delete it if no mtpc is running",
    ]
    assert sorted(p.name for p in in_tmp.iterdir()) == [".pkg.tmp-01234567", "pkg"]


def test_main_in_process_puts_the_signal_handlers_back(in_tmp, capsys):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert main(["schema"]) == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
