"""A package says what it holds: compile writes manifest.json (every other file, its size and sha256, hashed as it
was written), and `mtpc check DIR` reports a listed file that is missing, truncated or altered (exit 1) by name.

The hashes are checked here with hashlib over the files on disk, not with mtpc's own reader.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from mtpc.cli.main import main
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "qwen35-tiny-mtp.yaml"
# onnxruntime-genai alone: a package may lack a tokenizer there (a warning), so only the manifest can tell that
# one was deleted. (An onnx-genai target needs one: its own error says so, manifest or not.)
ORT_ONLY = "targets:\n  onnxruntime_genai: {}\n"


def files_on_disk(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("manifest")
    spec = folder / "ort-only.yaml"
    text = SPEC.read_text(encoding="utf-8")
    spec.write_text(text[:text.index("\ntargets:")] + "\n" + ORT_ONLY, encoding="utf-8")
    out = folder / "pkg"
    assert main(["compile", "-q", str(spec), "-o", str(out)]) == 0
    return out


@pytest.fixture
def copy(package, tmp_path) -> Path:
    return Path(shutil.copytree(package, tmp_path / "pkg"))


def check(capsys, root: Path) -> tuple[int, list[str], str]:
    code = main(["check", str(root)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_the_manifest_lists_every_other_file_with_its_size_and_sha256(package, capsys):
    on_disk = files_on_disk(package)
    manifest = json.loads(on_disk.pop("manifest.json"))
    assert manifest["format_version"] == 1
    assert manifest["files"] == [
        {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in on_disk.items()
    ]
    assert [f["name"] for f in manifest["files"]] == sorted(on_disk)  # sorted: the same spec gives the same bytes
    assert not any(str(package) in json.dumps(f) for f in manifest["files"])  # no build-machine path


def test_compile_reports_the_hashes_it_wrote_without_reading_the_files_back(tmp_path, capsys, monkeypatch):
    import mtpc.diffing.files as files

    monkeypatch.setattr(files, "file_chunks", lambda *a, **k: pytest.fail("a written file was read back"))
    assert main(["compile", "-q", "--format", "json", str(SPEC), "-o", str(tmp_path / "pkg")]) == 0
    reported = {f["path"]: (f["bytes"], f["sha256"]) for f in json.loads(capsys.readouterr().out)["files"]}
    assert reported == {name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in files_on_disk(tmp_path / "pkg").items()}


def test_a_sound_package_passes(package, capsys):
    code, out, err = check(capsys, package)
    assert (code, out) == (0, []) and "mtpc check: ok (1 target)" in err


def test_a_deleted_tokenizer_is_a_finding_not_a_warning(copy, capsys):
    size = (copy / "tokenizer.json").stat().st_size
    (copy / "tokenizer.json").unlink()
    code, out, _ = check(capsys, copy)
    assert code == 1
    assert out == [f"{copy}/tokenizer.json:/: is missing: manifest.json lists it ({size} bytes), so the package was "
                   "written with it"]  # once: not also the warning about a package without a tokenizer


def test_a_truncated_data_file_is_named(copy, capsys):
    data = copy / "mtp" / "mtp.onnx.data"
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.truncate(size - 100)
    code, out, _ = check(capsys, copy)
    assert code == 1
    assert f"{data}:/: has {size - 100} bytes, manifest.json records {size}: truncated or changed since it was written" in out


def test_an_altered_file_is_named(copy, capsys):
    data = copy / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    written = hashlib.sha256(raw).hexdigest()
    raw[len(raw) // 2] ^= 0xFF  # one weight byte: the graphs and configs still agree, only the hash can tell
    data.write_bytes(bytes(raw))
    code, out, _ = check(capsys, copy)
    assert code == 1
    assert out == [f"{data}:/: has been altered since it was written: its sha256 is {hashlib.sha256(raw).hexdigest()[:12]}…, "
                   f"manifest.json records {written[:12]}…"]


def test_a_package_written_without_a_tokenizer_has_none_to_miss(tmp_path, capsys):
    write_gguf(tmp_path / "m.gguf", tiny_arch(), seed=0)  # ships no tokenizer
    spec = tmp_path / "spec.yaml"
    spec.write_text("mtpc: 1\nname: t\nsource: {gguf: m.gguf}\n" + ORT_ONLY, encoding="utf-8")
    assert main(["compile", "-q", str(spec), "-o", str(tmp_path / "pkg")]) == 0
    capsys.readouterr()
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text(encoding="utf-8"))
    assert not any(f["name"].startswith("tokenizer") for f in manifest["files"])
    code, out, err = check(capsys, tmp_path / "pkg")
    assert code == 0  # the warning that og.Tokenizer cannot encode text; nothing missing
    assert [line for line in out if "tokenizer" in line and "warning:" in line] and not [l for l in out if "manifest" in l]


def test_a_package_from_before_the_manifest_is_checked_as_before(copy, capsys):
    (copy / "manifest.json").unlink()
    (copy / "tokenizer.json").unlink()
    code, out, _ = check(capsys, copy)
    assert code == 0 and any("warning: is missing" in line for line in out)


def test_a_broken_manifest_is_a_finding_about_itself(copy, capsys):
    (copy / "manifest.json").write_text('{"format_version": 1, "files": [{"name": "../x", "bytes": -1}]}', encoding="utf-8")
    code, out, _ = check(capsys, copy)
    assert code == 1 and all(line.startswith(f"{copy}/manifest.json:") for line in out) and out
