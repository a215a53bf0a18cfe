"""Header bounds and checkpoint sanity: versions, counts, types, weight dtypes, shapes in `inspect`, tokenizers."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from mtpc.checks import check_package
from mtpc.cli.main import main
from mtpc.util.diagnostics import ExitCode, SourceError
from mtpc.emit.tokenizer import synthetic_tokenizer_files
from mtpc.ir import SourceRef
from mtpc.sources import describe, open_weights
from mtpc.sources.gguf.header import GGUFHeader
from mtpc.sources.random_weights import raw_hf_tensors
from mtpc.sources.tokenizer_json import tokenizer_json_problem
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import write_gguf
from tests.fixtures.package_files import remanifest
from tests.fixtures.safetensors_writer import write_safetensors

ARCH = tiny_arch()


def _gguf(path: Path, **kv) -> Path:
    w = GGUFWriter(str(path), arch="qwen35")
    for key, value in kv.items():
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, value)
    w.add_tensor("a.weight", np.ones((2, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _patch(path: Path, at: int, fmt: str, value: int) -> Path:
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, at, value)
    path.write_bytes(raw)
    return path


def _refused(path: Path) -> str:
    with pytest.raises(SourceError) as caught:
        GGUFHeader(str(path))
    assert caught.value.exit_code is ExitCode.USAGE
    text = str(caught.value)
    assert str(path) in text and "\n" not in text
    return text


@pytest.mark.parametrize("version", [2, 3])
def test_gguf_versions_2_and_3_are_read(tmp_path, version):
    path = _patch(_gguf(tmp_path / "v.gguf"), 4, "<I", version)
    assert GGUFHeader(str(path)).metadata["GGUF.version"] == version


@pytest.mark.parametrize("version", [0, 1, 4, 2**32 - 1])
def test_other_gguf_versions_are_refused(tmp_path, version):
    path = _patch(_gguf(tmp_path / "v.gguf"), 4, "<I", version)
    assert f"GGUF version {version} is not supported (mtpc reads versions 2 and 3)" in _refused(path)


@pytest.mark.parametrize("at, what", [(8, "tensor_count"), (16, "metadata_kv_count")])
def test_counts_that_cannot_fit_the_file_are_refused_before_allocating(tmp_path, at, what):
    path = _patch(_gguf(tmp_path / "c.gguf"), at, "<Q", 2**63)
    assert f"{what} declares {2**63} entries, more than the" in _refused(path)


@pytest.mark.parametrize("alignment", [0, 3, 48])
def test_alignment_must_be_a_power_of_two(tmp_path, alignment):
    path = _gguf(tmp_path / "a.gguf", **{"general.alignment": alignment})
    assert f"'general.alignment' must be a positive power of two, not {alignment}" in _refused(path)


def test_a_string_alignment_is_refused(tmp_path):
    path = _gguf(tmp_path / "a.gguf", **{"general.alignment": "32"})
    assert "'general.alignment' must be a positive power of two, not '32'" in _refused(path)


def test_too_many_dimensions_and_unknown_value_types(tmp_path):
    path = _gguf(tmp_path / "d.gguf")
    raw = path.read_bytes()
    at = raw.find(b"a.weight") + len(b"a.weight")
    assert "GGUF tensor 'a.weight' has 9 dimensions (a GGUF tensor has 1 to 4)" in _refused(_patch(path, at, "<I", 9))
    path = _gguf(tmp_path / "t.gguf", **{"test.key": 5})
    raw = path.read_bytes()
    at = raw.find(b"test.key") + len(b"test.key")
    assert "metadata key 'test.key' has unknown GGUF value type 77" in _refused(_patch(path, at, "<I", 77))


def test_a_duplicate_metadata_key_is_refused(tmp_path):
    path = _gguf(tmp_path / "k.gguf", **{"test.aaaa": 1, "test.bbbb": 2})
    raw = path.read_bytes().replace(b"test.bbbb", b"test.aaaa")
    path.write_bytes(raw)
    assert "GGUF metadata key 'test.aaaa' appears twice" in _refused(path)


def test_a_corrupt_embedded_tokenizer_json_is_a_source_error_when_built(tmp_path, monkeypatch):
    monkeypatch.setattr(GGUFWriter, "add_token_merges", lambda self, merges: self.add_string("tokenizer.huggingface.json", "{oops"))
    path = write_gguf(tmp_path / "t.gguf", tiny_arch(vocab_size=272), tokenizer=True)
    monkeypatch.undo()
    info = describe(SourceRef("gguf", str(path)))  # the conversion waits until the files are asked for
    with pytest.raises(SourceError, match=r"t.gguf: GGUF metadata key 'tokenizer.huggingface.json': not valid JSON"):
        info.tokenizer_files


# ----------------------------------------------------------------------------- Hugging Face


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.uint8])
def test_a_non_float_weight_is_refused_naming_the_tensor(tmp_path, dtype):
    directory = write_hf_checkpoint(tmp_path, ARCH)
    tensors = raw_hf_tensors(ARCH, 0)
    name = "model.language_model.layers.1.self_attn.q_norm.weight"
    tensors[name] = tensors[name].astype(dtype)
    write_safetensors(directory / "model.safetensors", tensors)
    with pytest.raises(SourceError, match=rf"model.safetensors: tensor '{name}' has dtype \w+; a weight must be F32, F16 or BF16"):
        describe(SourceRef("hf", str(directory)))


def test_vision_tensors_are_not_held_to_the_weight_dtypes(tmp_path):
    directory = write_hf_checkpoint(tmp_path, ARCH)
    tensors = raw_hf_tensors(ARCH, 0)
    tensors["model.visual.patch_embed.index"] = np.arange(4, dtype=np.int64)  # outside the text model: dropped
    write_safetensors(directory / "model.safetensors", tensors)
    describe(SourceRef("hf", str(directory)))


def test_inspect_reports_shapes_that_contradict_the_config_as_findings(tmp_path, capsys):
    directory = write_hf_checkpoint(tmp_path, ARCH)
    tensors = raw_hf_tensors(ARCH, 0)
    tensors["model.language_model.layers.2.linear_attn.dt_bias"] = np.zeros(5, np.float32)
    del tensors["model.language_model.layers.1.mlp.up_proj.weight"]
    write_safetensors(directory / "model.safetensors", tensors)
    assert main(["inspect", "--format", "json", str(directory)]) == ExitCode.FINDINGS
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["findings"] == [  # every problem, in layer order
        f"{directory}: checkpoint has no tensor for layers.1.mlp.up_proj.weight (needed by config.json)",
        f"{directory}: tensor layers.2.linear_attn.dt_bias has shape [5], config.json implies [4]",
    ]
    assert main(["inspect", str(directory)]) == ExitCode.FINDINGS
    captured = capsys.readouterr()
    assert "mtp head:" in captured.out  # the report is still printed
    assert captured.err.splitlines()[1] == f"error: {directory}: tensor layers.2.linear_attn.dt_bias has shape [5], config.json implies [4]"
    # compile's refusal is unchanged: the first problem, as a SourceError
    with pytest.raises(SourceError, match="no tensor for layers.1.mlp.up_proj.weight"):
        ref = SourceRef("hf", str(directory))
        open_weights(ref, describe(ref))


def test_inspect_of_a_sound_checkpoint_has_no_findings(tmp_path, capsys):
    directory = write_hf_checkpoint(tmp_path, ARCH)
    assert main(["inspect", "--format", "json", str(directory)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["findings"] == []


@pytest.mark.parametrize(
    "content, problem",
    [
        (b'{"model": {"type": "BPE", "vocab": ', "not valid JSON"),
        (b"\xff\xfe", "not UTF-8 text"),
        (b"[1, 2]", "it has no `model` object"),
        (b'{"model": "BPE"}', "it has no `model` object"),
        (b'{"model": {}}', "the tokenizers library cannot load it"),
    ],
)
def test_a_corrupt_tokenizer_json_is_refused_before_it_is_copied(tmp_path, content, problem, capsys):
    assert problem in tokenizer_json_problem(content)
    directory = write_hf_checkpoint(tmp_path / "ckpt", ARCH)
    (directory / "tokenizer.json").write_bytes(content)
    # Describing names the file (inspect, check SPEC, plan: metadata only); making the package's copy reads and
    # loads it, and refuses it, naming the checkpoint's file.
    info = describe(SourceRef("hf", str(directory)))
    assert "tokenizer.json" in info.tokenizer_names
    with pytest.raises(SourceError, match=rf"tokenizer.json: .*{problem}") as caught:
        info.tokenizer_files
    assert str(directory / "tokenizer.json") in str(caught.value)
    spec = tmp_path / "spec.yaml"
    spec.write_text("mtpc: 1\nname: t\nsource: {hf: ckpt}\n")
    capsys.readouterr()
    assert main(["compile", str(spec), "-o", str(tmp_path / "out")]) == ExitCode.USAGE
    assert f"{directory / 'tokenizer.json'}: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_corrupt_tokenizer_config_is_refused(tmp_path):
    directory = write_hf_checkpoint(tmp_path, ARCH)
    (directory / "tokenizer_config.json").write_text("{")
    info = describe(SourceRef("hf", str(directory)))
    with pytest.raises(SourceError, match="tokenizer_config.json: not valid JSON"):
        info.tokenizer_files


def test_a_sound_tokenizer_loads():
    assert tokenizer_json_problem(dict(synthetic_tokenizer_files(ARCH))["tokenizer.json"]) is None


def test_check_rejects_a_package_whose_tokenizer_json_is_corrupt(tmp_path, capsys):
    spec = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml"
    package = tmp_path / "pkg"
    assert main(["compile", "-q", str(spec), "-o", str(package)]) == 0
    assert check_package(package) == []
    (package / "tokenizer.json").write_text('{"version": "1.0"}')
    findings = check_package(remanifest(package))  # as if written so: the tokenizer's own finding is what is checked
    assert [(f.file, f.message) for f in findings] == [("tokenizer.json", "not a tokenizer: it has no `model` object")]
    capsys.readouterr()
    assert main(["check", str(package)]) == ExitCode.FINDINGS
