"""`source.head`: a GGUF target's MTP head file, named, paired from beside the target, or `off`; refusals at the
spec field that chose the file (sources/gguf/head_file.py and siblings.py hold the rules)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mtpc.pipeline.driver import build_ir
from mtpc.spec.loader import load_spec
from mtpc.spec.lower import lower
from mtpc.util.diagnostics import ExitCode, MtpcError
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf
from tests.fixtures.two_file_gguf import split


@pytest.fixture(scope="module")
def one_file(tmp_path_factory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("one") / "Tiny-F32.gguf", tiny_arch(), seed=0, recurrent_layers=True, tokenizer=True)


def _spec(tmp_path: Path, source: str, body: str = "") -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(f"mtpc: 1\nname: t\nsource:\n{source}{body}", encoding="utf-8")
    return path


def _failure(spec: Path) -> MtpcError:
    with pytest.raises(MtpcError) as caught:
        lower(load_spec(spec))
    return caught.value


def test_a_named_head_file_is_read_with_the_target(one_file, tmp_path):
    (tmp_path / "m").mkdir()
    split(one_file, tmp_path / "m" / "Tiny.gguf", tmp_path / "head.gguf")
    ir, _ = lower(load_spec(_spec(tmp_path, "  gguf: m/Tiny.gguf\n  head: head.gguf\n")))
    assert ir.source.head == str(tmp_path / "head.gguf") and ir.architecture.mtp_num_layers == 1


def test_a_head_file_beside_the_target_is_paired_unless_mtp_head_is_off(one_file, tmp_path):
    target, head = split(one_file, tmp_path / "Tiny-298K-F32.gguf", tmp_path / "mtp-Tiny-F32.gguf")
    ir, _ = lower(load_spec(_spec(tmp_path, "  gguf: Tiny-298K-F32.gguf\n")))
    assert ir.source.head == str(head)
    assert ir.notes[0].startswith("the MTP head comes from mtp-Tiny-F32.gguf beside the target"), ir.notes
    ir, _ = lower(load_spec(_spec(tmp_path, "  gguf: Tiny-298K-F32.gguf\n", "mtp:\n  head: off\n")))
    assert ir.source.head is None and ir.architecture.mtp_num_layers == 0


def test_a_missing_head_file_is_refused_at_source_head(one_file, tmp_path):
    split(one_file, tmp_path / "Tiny.gguf", tmp_path / "mtp-Tiny-F32.gguf")
    error = _failure(_spec(tmp_path, "  gguf: Tiny.gguf\n  head: mtp-Tiny-F23.gguf\n"))
    assert error.exit_code == ExitCode.USAGE
    (d,) = error.diagnostics
    assert (d.message, d.span.line, d.span.col) == ("MTP head file 'mtp-Tiny-F23.gguf' does not exist", 5, 9)
    assert d.hint.startswith("did you mean 'mtp-Tiny-F32.gguf'? source.head names the GGUF file of the target's MTP head")


def test_a_named_head_file_of_another_model_is_refused_at_source_head(one_file, tmp_path):
    target, head = split(one_file, tmp_path / "Tiny.gguf", tmp_path / "head.gguf",
                         head_fields={"qwen35.feed_forward_length": 256})
    error = _failure(_spec(tmp_path, "  gguf: Tiny.gguf\n  head: head.gguf\n"))
    (d,) = error.diagnostics
    assert error.exit_code == ExitCode.USAGE and d.span.line == 5
    assert d.message == (f"{head} is not the MTP head of {target}: qwen35.feed_forward_length is 256 there, 128 in "
                         "the target")


def test_a_paired_head_file_with_other_values_is_refused_at_source_gguf_by_compile_only(one_file, tmp_path):
    target, head = split(one_file, tmp_path / "Tiny.gguf", tmp_path / "mtp-Tiny-F32.gguf",
                         head_edit={"output.weight": lambda w: -w})
    spec = _spec(tmp_path, "  gguf: Tiny.gguf\n")
    build_ir(spec)  # metadata only: the headers agree
    with pytest.raises(MtpcError) as caught:
        build_ir(spec, source_files=True)  # compile's lowering reads the copies
    (d,) = caught.value.diagnostics
    assert d.span.line == 4 and d.message.startswith(f"{head} is not the MTP head of {target}: its output.weight holds")


def test_a_file_beside_the_target_that_is_no_gguf_is_passed_over_with_a_note(one_file, tmp_path):
    target, _ = split(one_file, tmp_path / "Tiny.gguf", tmp_path / "elsewhere.gguf")
    (tmp_path / "mtp-notes.gguf").write_text("not a GGUF")
    ir, _ = lower(load_spec(_spec(tmp_path, "  gguf: Tiny.gguf\n")))
    assert ir.source.head is None and ir.architecture.mtp_num_layers == 0
    assert any(n.startswith("mtp-notes.gguf beside the target is not its MTP head") and n.endswith(": not paired")
               for n in ir.notes), ir.notes


def test_head_on_without_a_head_file_says_what_would_add_one(one_file, tmp_path):
    split(one_file, tmp_path / "Tiny.gguf", tmp_path / "elsewhere.gguf")
    with pytest.raises(MtpcError) as caught:
        build_ir(_spec(tmp_path, "  gguf: Tiny.gguf\n", "mtp:\n  head: on\n"))
    (d,) = caught.value.diagnostics
    assert "mtp.head is 'on' but the source ships no MTP head (the GGUF holds no MTP head" in d.message
    assert "which would add MTP: put it beside this file or name it as source.head" in d.message


def test_the_metadata_verbs_read_the_two_files_headers_only(one_file, tmp_path, monkeypatch, capsys):
    from mtpc.cli.main import main
    from mtpc.sources.gguf.header import GGUFHeader

    split(one_file, tmp_path / "Tiny.gguf", tmp_path / "mtp-Tiny-F32.gguf")
    spec = _spec(tmp_path, "  gguf: Tiny.gguf\n")

    def refuse(self, info):
        raise AssertionError(f"{self.path}: the bytes of {info.name} were read")

    monkeypatch.setattr(GGUFHeader, "data", refuse)
    assert main(["inspect", str(tmp_path / "Tiny.gguf")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^mtp head: +yes, 1 layer\(s\)$", out, re.M) and re.search(r"^mtp_head_file: +mtp-Tiny-F32.gguf$", out, re.M)
    assert main(["plan", str(spec)]) == 0 and main(["check", str(spec)]) == 0
    capsys.readouterr()
    assert main(["compile", "-q", str(spec), "-o", str(tmp_path / "pkg")]) == 3  # compile reads them
    assert "the bytes of" in capsys.readouterr().err
