"""Every family as llama.cpp's converter publishes it in two files: `--no-mtp` writes the target, `--mtp` the
head's own `mtp-<model>-<type>.gguf` (its blocks and copies of the tensors it shares), both named by the converter.

- The target with its F32 head file beside it (and a Q8_0 one, which llama.cpp's pairing passes over for the F32
  target) compiles to the one-file f32 GGUF's package: every file but provenance.json byte-identical.
- og.MtpGenerator on it gives greedy's tokens for 1..4 drafts, with the one-file package's counters.
- The target alone compiles text-only and says the head file would add MTP; a head file of another fixture is
  refused, naming both files.

The mechanics that do not vary by family (a head file stored in another type, `head: off`, a head file with
another model's values in the same shapes) run on Qwen3.5's files (`MECHANICS`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mtpc
from mtpc.cli.main import main
from mtpc.pipeline.driver import build_ir
from mtpc.util.diagnostics import ExitCode, MtpcError
from tests.fixtures.lazy import Lazy
from tests.runtime import decoding
from tests.runtime.conftest import STEPS, compile_spec, write_spec

from .families import FAMILIES, family

NAMES = sorted(n for n in FAMILIES if family(n).supports("llama.cpp converter") and family(n).supports("llama.cpp two files"))
MECHANICS = "qwen35"


def _source(spec_folder: Path, target: Path, head: Path | str | None = None) -> str:
    head_entry = "" if head is None else f", head: {head if isinstance(head, str) else head.relative_to(spec_folder)}"
    return f"{{gguf: {target.relative_to(spec_folder)}{head_entry}}}"


@pytest.fixture(scope="session")
def two_file_packages(conformance_dir, two_files) -> Lazy:
    """family -> the package compiled from the target, its head file paired from beside it; the spec named as the
    one-file f32 package's (`conftest.gguf_packages`), so that the two can be byte-identical."""

    def build(f: str):
        spec = write_spec(conformance_dir / f"two-{f}.yaml", f"gguf-{f}-f32", _source(conformance_dir, two_files[f].target))
        return compile_spec(spec, conformance_dir / f"pkg-two-{f}")

    return Lazy(build)


def _files(package: Path) -> dict[str, dict]:
    return {entry["name"]: entry for entry in json.loads((package / "manifest.json").read_text())["files"]}


@pytest.mark.parametrize("name", NAMES)
def test_the_two_files_compile_to_the_one_file_package(two_files, two_file_packages, gguf_packages, name):
    published = two_files[name]
    # The converter names the head file from the model, not from the target's file name.
    assert published.heads["f32"].name.startswith("mtp-") and published.target.stem not in published.heads["f32"].stem
    two, one = _files(two_file_packages[name]), _files(gguf_packages[name, "f32"])
    assert "mtp/genai_config.json" in two
    assert {n: e for n, e in two.items() if n != "provenance.json"} == {n: e for n, e in one.items() if n != "provenance.json"}
    recorded = json.loads((two_file_packages[name] / "provenance.json").read_text())["source"]["files"]
    assert [f["name"] for f in recorded] == [published.target.name, published.heads["f32"].name]


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("name", NAMES)
def test_mtp_decoding_of_the_two_files_equals_greedy_with_the_one_files_counters(two_file_packages, gguf_models,
                                                                                file_greedy, name, max_draft):
    prompt = list(family(name).prompts[0])
    main_model, head = decoding.load(two_file_packages[name]), decoding.load(two_file_packages[name] / "mtp")
    run = decoding.speculative(main_model, head, prompt, STEPS, max_draft)
    assert run.tokens == file_greedy[name, "f32"][tuple(prompt)]
    assert run == decoding.speculative(*gguf_models[name, "f32"], prompt, STEPS, max_draft)
    assert run.accepted > 0, run


@pytest.mark.parametrize("name", NAMES)
def test_the_target_alone_compiles_text_only_and_says_the_head_file_would_add_mtp(conformance_dir, two_files, name,
                                                                                 capsys):
    folder = conformance_dir / f"alone-{name}"
    folder.mkdir(exist_ok=True)
    target = Path(shutil.copy(two_files[name].target, folder))
    spec = write_spec(conformance_dir / f"alone-{name}.yaml", f"alone-{name}", _source(conformance_dir, target))
    result = mtpc.compile(spec, conformance_dir / f"pkg-alone-{name}")
    assert not any(f.path.startswith("mtp/") for f in result.files)
    assert "mtp" not in json.loads((result.output / "genai_config.json").read_text())["model"]
    would_add = [n for n in result.notes if "which would add MTP" in n and "mtp-<model>-<type>.gguf" in n]
    assert len(would_add) == 1, result.notes
    assert main(["inspect", str(target)]) == 0
    assert "which would add MTP" in capsys.readouterr().out


@pytest.mark.parametrize("name", NAMES)
def test_a_head_file_of_another_fixture_is_refused_naming_both_files(conformance_dir, two_files, name):
    other = NAMES[(NAMES.index(name) + 1) % len(NAMES)]
    target, head = two_files[name].target, two_files[other].heads["f32"]
    spec = write_spec(conformance_dir / f"wrong-head-{name}.yaml", "wrong-head",
                      _source(conformance_dir, target, head))
    with pytest.raises(MtpcError) as refused:
        mtpc.compile(spec, conformance_dir / f"pkg-wrong-head-{name}")
    (diagnostic,) = refused.value.diagnostics
    assert refused.value.exit_code == ExitCode.USAGE
    assert f"{head.resolve()} is not the MTP head of {target.resolve()}" in diagnostic.message, diagnostic.message
    assert diagnostic.span.line == 3 and diagnostic.source_line.startswith("source:"), diagnostic
    assert not (conformance_dir / f"pkg-wrong-head-{name}").exists()


def test_the_head_file_nearest_the_targets_quantization_is_paired_as_llama_cpp_pairs_it(conformance_dir, two_files):
    published = two_files[MECHANICS]
    spec = write_spec(conformance_dir / "pairing.yaml", "pairing", _source(conformance_dir, published.target))
    ir, _ = build_ir(spec)
    f32, q8_0 = published.heads["f32"].name, published.heads["q8_0"].name
    assert ir.source.head == str(published.heads["f32"].resolve())
    assert any(f"comes from {f32} beside the target" in n and f"chosen over {q8_0}" in n for n in ir.notes), ir.notes


def test_a_head_file_stored_in_another_type_is_held_to_the_target_by_value_and_named(conformance_dir, two_files):
    published = two_files[MECHANICS]
    spec = write_spec(conformance_dir / "q8-head.yaml", "q8-head",
                      _source(conformance_dir, published.target, published.heads["q8_0"]))
    result = mtpc.compile(spec, conformance_dir / "pkg-q8-head")
    assert any(f.path == "mtp/mtp.onnx" for f in result.files)
    assert any("token_embd.weight is F32 in the target, Q8_0 in the head file" in n for n in result.notes), result.notes


def test_head_off_reads_the_target_alone_and_names_the_head_files_beside_it(conformance_dir, two_files):
    published = two_files[MECHANICS]
    spec = write_spec(conformance_dir / "head-off.yaml", "head-off", _source(conformance_dir, published.target, "off"))
    result = mtpc.compile(spec, conformance_dir / "pkg-head-off")
    assert not any(f.path.startswith("mtp/") for f in result.files)
    for head in published.heads.values():
        assert f"source.head is 'off': {head.name} beside the target holds its MTP head and is not read" in result.notes


def test_another_models_head_file_of_the_same_shapes_is_refused_once_its_values_are_read(conformance_dir, two_files):
    """Headers cannot tell two models of one shape apart: `check SPEC` (metadata only) passes; compile, which reads
    the head file's copy of the embedding, refuses it."""
    from gguf import GGMLQuantizationType as QT

    from tests.fixtures.gguf_requantize import requantize

    published = two_files[MECHANICS]
    folder = conformance_dir / "same-shape"
    folder.mkdir(exist_ok=True)
    other = requantize(published.heads["f32"], folder / "mtp-Other-F32.gguf", (), QT.F32,
                       edit={"token_embd.weight": lambda w: w[::-1]})
    spec = write_spec(conformance_dir / "same-shape.yaml", "same-shape", _source(conformance_dir, published.target, other))
    assert main(["check", str(spec)]) == 0
    with pytest.raises(MtpcError) as refused:
        mtpc.compile(spec, conformance_dir / "pkg-same-shape")
    (diagnostic,) = refused.value.diagnostics
    assert refused.value.exit_code == ExitCode.USAGE
    assert (f"{other.resolve()} is not the MTP head of {published.target.resolve()}: its token_embd.weight holds other "
            "values than the target's") in diagnostic.message, diagnostic.message
