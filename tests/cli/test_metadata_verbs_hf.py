"""The metadata verbs on a Hugging Face folder do only the work their answer needs (issue 22).

As for a GGUF (tests/cli/test_metadata_verbs.py): no timings, the work itself. The folder's headers are
parsed once however many readers ask, numpy is not imported to read them, and the tokenizer files are
named, not read: loading a 248k-token tokenizer.json in `tokenizers` is what compile does before it
copies it, as it converts a GGUF's vocabulary.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import mtpc
from mtpc.cli.main import main
from mtpc.emit.tokenizer import synthetic_tokenizer_files
from mtpc.ir import SourceRef
from mtpc.pipeline.driver import build
from mtpc.sources.hf import files as hf_files, reader as hf_reader
from mtpc.sources.hf.safetensors import SafetensorsFile
from tests.cli.test_metadata_verbs import HEAVY, VALID_ONLY, _loaded
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint

# What reading a checkpoint's headers and naming its tokenizer files needs none of.
HEADERS_ONLY = ("numpy", "tokenizers")
SPEC = ("mtpc: 1\nname: {name}\nsource: {{hf: {folder}}}\nquantization:\n  default: {{bits: 4, block_size: 32}}\n"
        # A window that holds a verify of either draft count keeps max_draft_tokens a runtime setting.
        "targets:\n  onnxruntime_genai: {{execution_provider: cpu, max_draft_tokens: {draft}, state_window: 5}}\n"
        "  onnx_genai: {{layout: flat}}\n")


def _checkpoint(folder: Path, normalized: bool = False) -> Path:
    """A sharded checkpoint with its tokenizer files; `normalized`: tokenizer.json normalizes to NFC."""
    arch = tiny_arch(vocab_size=300)
    directory = write_hf_checkpoint(folder, arch, sharded=True)
    for relpath, content in synthetic_tokenizer_files(arch):
        if relpath == "tokenizer.json" and normalized:
            doc = json.loads(content)
            doc["normalizer"] = {"type": "NFC"}
            content = json.dumps(doc).encode()
        (directory / relpath).write_bytes(content)
    return directory


def _spec(folder: Path, name: str, checkpoint: str = "ckpt", draft: int = 4) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, folder=checkpoint, draft=draft))
    return path


@pytest.fixture(scope="module")
def hf_spec(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hfmeta")
    _checkpoint(folder / "ckpt")
    return _spec(folder, "a")


@pytest.fixture
def fresh(monkeypatch):
    """No description or header kept from an earlier test."""
    monkeypatch.setattr(hf_files, "_last_weights", None)
    monkeypatch.setattr(hf_reader, "_last_description", None)


@pytest.mark.parametrize("verb", ["inspect", "check", "plan", "diff"])
def test_the_metadata_verbs_read_headers_without_numpy_or_the_tokenizer(hf_spec, tmp_path, verb):
    argv = {"inspect": ["inspect", str(hf_spec.parent / "ckpt")], "check": ["check", str(hf_spec)],
            "plan": ["plan", "-q", str(hf_spec), "--against", str(tmp_path / "none")],
            "diff": ["diff", str(hf_spec), str(_spec(hf_spec.parent, "b", draft=3))]}[verb]
    code, loaded = _loaded(*argv, watched=HEAVY + HEADERS_ONLY + VALID_ONLY)
    assert code == (1 if verb == "diff" else 0)
    assert loaded == []


def test_compile_reads_and_loads_the_tokenizer_once_the_metadata_verbs_never(hf_spec, monkeypatch, fresh):
    from mtpc.sources import tokenizer_json

    read = []
    real = hf_files._read_tokenizer_files
    monkeypatch.setattr(hf_files, "_read_tokenizer_files", lambda *a: read.append(1) or real(*a))
    with build(hf_spec, defer=True, defer_graphs=True) as deferred:  # check SPEC, plan
        names = sorted(a.relpath for a in deferred.artifacts)
    mtpc.diff(hf_spec, _spec(hf_spec.parent, "b", draft=3))
    assert read == []
    loaded = []
    real_problem = tokenizer_json.tokenizer_json_problem
    monkeypatch.setattr(hf_files, "tokenizer_json_problem", lambda data: loaded.append(1) or real_problem(data))
    with build(hf_spec) as compiled:  # compile
        files = {a.relpath: a for a in compiled.artifacts}
        assert sorted(files) == names
        source = hf_spec.parent / "ckpt"
        for name in ("tokenizer.json", "tokenizer_config.json"):
            assert files[name].content == (source / name).read_bytes()
    assert read == [1] and loaded == [1]


def test_diff_of_two_folders_compares_their_tokenizers(tmp_path, fresh):
    _checkpoint(tmp_path / "ckpt")
    _checkpoint(tmp_path / "other", normalized=True)
    changes = mtpc.diff(_spec(tmp_path, "a"), _spec(tmp_path, "b", checkpoint="other")).changes
    assert [c.path for c in changes if c.file == "tokenizer.json"] == [("normalizer",)]
    assert "tokenizer_config.json" not in {c.file for c in changes}
    same = mtpc.diff(_spec(tmp_path, "a"), _spec(tmp_path, "c", draft=3)).changes
    assert not {c.file for c in same} & {"tokenizer.json", "tokenizer_config.json"}


def test_the_headers_are_parsed_once_for_describe_inspect_and_the_weights(hf_spec, monkeypatch, capsys, fresh):
    parsed = []
    real_init = SafetensorsFile.__init__
    monkeypatch.setattr(SafetensorsFile, "__init__", lambda self, path: parsed.append(Path(path).name) or real_init(self, path))
    shards = sorted(p.name for p in (hf_spec.parent / "ckpt").glob("*.safetensors"))
    assert main(["inspect", str(hf_spec.parent / "ckpt")]) == 0  # describe, then the shapes checked against config.json
    assert sorted(parsed) == shards
    mtpc.diff(hf_spec, _spec(hf_spec.parent, "b", draft=3))  # two lowerings, one description
    with build(hf_spec) as compiled:  # and the weight store of a compile
        assert any(a.relpath == "model.onnx.data" for a in compiled.artifacts)
        b"".join(next(a for a in compiled.artifacts if a.relpath == "model.onnx.data").iter_bytes())
    assert sorted(parsed) == shards


def test_a_rewritten_folder_is_described_afresh(tmp_path, fresh):
    directory = write_hf_checkpoint(tmp_path / "ckpt", tiny_arch())
    ref = SourceRef("hf", str(directory))
    first = hf_reader.describe(ref)
    assert hf_reader.describe(ref) is first
    write_hf_checkpoint(tmp_path / "new", tiny_arch(num_layers=2), sharded=True)
    for p in directory.iterdir():
        p.unlink()
    for p in (tmp_path / "new").iterdir():
        os.replace(p, directory / p.name)
    again = hf_reader.describe(ref)
    assert again is not first and again.architecture.num_layers == 2
    assert dict(again.facts)["safetensors_files"] == 2
