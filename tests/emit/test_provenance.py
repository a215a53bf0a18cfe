"""provenance.json: what it records, that it stays deterministic and path-free, and how it is compared."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from mtpc.emit import provenance_record as provenance
from mtpc.cli.main import main
from mtpc.diffing.files import diff_files, directory_files
from mtpc.pipeline.driver import build, build_ir
from mtpc.schema.validation import errors as schema_errors
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import write_gguf

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "specs" / "qwen35-tiny-mtp.yaml"


def _spec(folder: Path, source: str, name: str = "p") -> Path:
    spec = folder / f"{name}.yaml"
    spec.write_text(f"mtpc: 1\nname: {name}\nsource:\n  {source}\ntargets:\n  onnxruntime_genai: {{}}\n")
    return spec


def _record(spec: Path) -> dict:
    with build(spec) as result:
        art = next(a for a in result.artifacts if a.relpath == provenance.PROVENANCE_NAME)
        return json.loads(art.read())


def test_records_version_spec_source_and_profile():
    doc = _record(TINY)
    text = TINY.read_bytes()
    assert doc["mtpc_version"] == __import__("mtpc").__version__
    assert doc["spec"]["file"] == TINY.name
    assert doc["spec"]["sha256"] == hashlib.sha256(text).hexdigest()
    assert "\n".join(doc["spec"]["lines"]).encode() == text  # the spec itself, byte for byte
    assert doc["source"] == {"kind": "synthetic", "seed": 0, "model_sha256": doc["source"]["model_sha256"]}
    assert doc["runtime_profiles"]["onnxruntime_genai"]["version"] == "0.18.0"
    assert doc["runtime_profiles"]["onnx_genai"] == {"layout": "flat", "commit": "ac9c7dd067dd7ff620fbe27b38b524adfa6fd946"}
    assert schema_errors("provenance", doc) == []


def test_hf_source_is_fingerprinted_by_relative_names_and_no_build_path_is_recorded(tmp_path):
    ckpt = write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=0)
    spec = _spec(tmp_path, "hf: ckpt")
    out = tmp_path / "pkg"
    assert main(["compile", str(spec), "-o", str(out), "-q"]) == 0
    doc = json.loads((out / "provenance.json").read_text())
    files = {f["name"]: f for f in doc["source"]["files"]}
    assert set(files) == {p.name for p in ckpt.iterdir()}
    for name, entry in files.items():  # small files are hashed whole
        assert entry["bytes"] == (ckpt / name).stat().st_size
        assert entry["sha256"] == hashlib.sha256((ckpt / name).read_bytes()).hexdigest()
    for path in out.rglob("*"):
        if path.suffix in (".json", ".yaml", ".md"):
            assert str(tmp_path) not in path.read_text(), path.name


def test_large_files_are_fingerprinted_by_header_and_samples_never_read_whole(tmp_path, monkeypatch):
    ckpt = write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=0)
    gguf = write_gguf(tmp_path / "m.gguf", tiny_arch(), seed=0)
    monkeypatch.setattr(provenance, "WHOLE_HASH_LIMIT", 1024)
    monkeypatch.setattr(provenance, "SAMPLE_BYTES", 256)
    st = ckpt / "model.safetensors"
    raw = st.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    entry = provenance.file_fingerprint(st, st.name)
    assert entry["header_sha256"] == hashlib.sha256(raw[: 8 + length]).hexdigest()
    assert "sha256" not in entry

    # A changed weight byte inside a sampled window changes the fingerprint; the header hash stays.
    data = bytearray(raw)
    data[len(data) - 1] ^= 0xFF
    st.write_bytes(bytes(data))
    changed = provenance.file_fingerprint(st, st.name)
    assert changed["header_sha256"] == entry["header_sha256"]
    assert changed["sample_sha256"] != entry["sample_sha256"]

    # GGUF: the header is everything before the first tensor's data, which gguf-py itself locates.
    import gguf as gguf_py

    reader = gguf_py.GGUFReader(str(gguf))
    first = min(int(t.data_offset) for t in reader.tensors)
    g = provenance.file_fingerprint(gguf, gguf.name)
    assert g["header_sha256"] == hashlib.sha256(gguf.read_bytes()[:first]).hexdigest()



def test_a_large_checkpoint_file_is_fingerprinted_from_its_header_and_about_a_mebibyte(tmp_path, monkeypatch):
    header = json.dumps({"w": {"dtype": "F32", "shape": [1 << 26], "data_offsets": [0, 1 << 28]}}).encode()
    big = tmp_path / "model-00001-of-00002.safetensors"
    with open(big, "wb") as f:  # 256 MiB of (sparse) weights behind a real header
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + (1 << 28))
    read = []
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            block = self.f.read(n)
            read.append(len(block))
            return block

        def seek(self, *a):
            return self.f.seek(*a)

    monkeypatch.setattr(provenance, "open", lambda p, mode="r": Counting(real_open(p, mode)), raising=False)
    entry = provenance.file_fingerprint(big, big.name)
    assert entry["header_sha256"] == hashlib.sha256(struct.pack("<Q", len(header)) + header).hexdigest()
    assert 0 < sum(read) <= 8 + 8 + len(header) + provenance.SAMPLE_WINDOWS * provenance.SAMPLE_BYTES  # ~1 MiB of 256


def test_compare_names_a_different_spec_and_a_changed_source(tmp_path):
    ckpt = write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=0)
    spec = _spec(tmp_path, "hf: ckpt")
    recorded = _record(spec)
    ir, _ = build_ir(spec)
    assert provenance.compare(recorded, ir, spec) == []

    other = _spec(tmp_path, "hf: ckpt", name="other")
    found = provenance.compare(recorded, ir, other)
    assert [m.what for m in found] == ["spec"]
    assert "different spec: p.yaml" in found[0].message and "not other.yaml" in found[0].message
    assert "-name: p" in found[0].message and "+name: other" in found[0].message

    write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), seed=1)  # same layout, other weights
    found = provenance.compare(recorded, ir, spec)
    assert [m.what for m in found] == ["source"]
    assert "model.safetensors: same size, different content" in found[0].message


def test_package_diff_shows_the_spec_change_line_by_line(tmp_path):
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text("mtpc: 1\nname: p\nsource:\n  synthetic: {seed: 0}\ntargets:\n  onnxruntime_genai: {}\n")
    b.write_text("# a comment on top\nmtpc: 1\nname: p\nsource:\n  synthetic: {seed: 1}\ntargets:\n  onnxruntime_genai: {}\n")
    for spec, out in ((a, "pa"), (b, "pb")):
        assert main(["compile", str(spec), "-o", str(tmp_path / out), "-q"]) == 0
    changes = [c for c in diff_files(directory_files(tmp_path / "pa"), directory_files(tmp_path / "pb"))
               if c.file == "provenance.json"]
    rendered = sorted(c.render() for c in changes)
    assert rendered == sorted([
        '+ provenance.json:/spec/lines/0 = "# a comment on top"',
        '~ provenance.json:/spec/lines/3: "  synthetic: {seed: 0}" -> "  synthetic: {seed: 1}"',
        "~ provenance.json:/source/seed: 0 -> 1",
        "~ provenance.json:/spec/file: \"a.yaml\" -> \"b.yaml\"",
        # People read the hashes' first 12 hex digits (the JSON output keeps them whole).
        f"~ provenance.json:/spec/sha256: \"{hashlib.sha256(a.read_bytes()).hexdigest()[:12]}…\" -> "
        f"\"{hashlib.sha256(b.read_bytes()).hexdigest()[:12]}…\"",
    ]), rendered


def test_check_validates_a_recorded_provenance(tmp_path, capsys):
    out = tmp_path / "pkg"
    assert main(["compile", str(TINY), "-o", str(out), "-q"]) == 0
    doc = json.loads((out / "provenance.json").read_text())
    doc["spec"]["file"] = "/home/someone/spec.yaml"  # a build-machine path is not allowed
    (out / "provenance.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["check", str(out)]) == 1
    captured = capsys.readouterr()
    assert "provenance.json" in captured.out + captured.err


def test_the_same_spec_compiled_from_two_folders_records_the_same_bytes(tmp_path):
    ckpt_a = write_hf_checkpoint(tmp_path / "a" / "ckpt", tiny_arch(), seed=0)
    write_hf_checkpoint(tmp_path / "b" / "deeper" / "ckpt", tiny_arch(), seed=0)
    spec_a = _spec(ckpt_a.parent, "hf: ckpt")
    spec_b = _spec(tmp_path / "b" / "deeper", "hf: ckpt")
    records = []
    for spec in (spec_a, spec_b):
        with build(spec) as result:
            records.append(next(a for a in result.artifacts if a.relpath == provenance.PROVENANCE_NAME).read())
    assert records[0] == records[1]


def test_a_gguf_source_is_its_file_by_base_name(tmp_path):
    from mtpc.ir import SourceRef

    (tmp_path / "deep").mkdir()
    path = write_gguf(tmp_path / "deep" / "m.gguf", tiny_arch(), seed=0)
    fingerprint = provenance.source_fingerprint(SourceRef("gguf", path=str(path)))
    assert fingerprint == {"kind": "gguf", "files": [
        {"name": "m.gguf", "bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}]}
    assert schema_errors("provenance", {"format_version": 1, "mtpc_version": "x", "source": fingerprint,
                                        "runtime_profiles": {}}) == []


def test_a_synthetic_fingerprint_leaves_out_fields_added_later_while_they_hold_their_default():
    """A model that uses none of the IR fields marked `ir.fields.added` hashes as it did before they existed
    (its dataclasses without them, as `asdict` gave them), and setting one changes the fingerprint."""
    import dataclasses

    from mtpc.ir import HeadLayout, SourceRef, SyntheticSpec
    from mtpc.ir.fields import OMITTED_AT_DEFAULT

    arch = tiny_arch()
    spec = SyntheticSpec(arch, full_attention_interval=2, norm_weight_scale=0.1)
    older = dataclasses.asdict(spec)
    for owner, dataclass in ((older, spec), (older["architecture"], arch), (older["architecture"]["rope"], arch.rope)):
        for name in [f.name for f in dataclasses.fields(dataclass) if f.metadata.get(OMITTED_AT_DEFAULT)]:
            del owner[name]
    digest = hashlib.sha256(json.dumps(older, sort_keys=True, default=str).encode()).hexdigest()
    assert provenance.source_fingerprint(SourceRef("synthetic", seed=0, synthetic=spec))["model_sha256"] == digest
    changed = SyntheticSpec(dataclasses.replace(arch, head_layout=HeadLayout.TRAILING_LAYER), 2, 0.1)
    assert provenance.source_fingerprint(SourceRef("synthetic", seed=0, synthetic=changed))["model_sha256"] != digest
    fitted = SyntheticSpec(arch, 2, 0.1, mtp_head="fitted")
    assert provenance.source_fingerprint(SourceRef("synthetic", seed=0, synthetic=fitted))["model_sha256"] != digest


def test_a_checkpoint_is_fingerprinted_once_while_its_files_are_unchanged(tmp_path, monkeypatch):
    """`diff SPEC SPEC` records one checkpoint for both specs: its files are hashed once; a file rewritten
    in between (another size, inode or time) is hashed again."""
    import os

    from mtpc.ir import SourceRef

    directory = write_hf_checkpoint(tmp_path / "ckpt", tiny_arch())
    hashed = []
    real = provenance.file_fingerprint
    monkeypatch.setattr(provenance, "file_fingerprint", lambda path, name: hashed.append(name) or real(path, name))
    monkeypatch.setattr(provenance, "_last_fingerprint", None)
    ref = SourceRef("hf", str(directory))
    first = provenance.source_fingerprint(ref)
    files = len(hashed)
    again = provenance.source_fingerprint(ref)
    assert again == first and again is not first and len(hashed) == files
    again["files"].clear()  # each record is its own document
    assert provenance.source_fingerprint(ref) == first
    config = directory / "config.json"
    config.write_text(config.read_text() + " ")
    os.utime(config, ns=(1, 1))
    changed = provenance.source_fingerprint(ref)
    assert len(hashed) == 2 * files and changed != first
