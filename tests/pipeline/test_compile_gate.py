"""compile's gate: every contract check of `mtpc check`, run in memory before anything is written.

A spec the runtimes cannot use is refused at its own lines (exit 1) by lowering or a pass; the
gate is the backstop, and what it still finds is a bug in mtpc (exit 3). To reach it, these tests
switch off the spec-level refusal of issue 7's case (a GGUF's Q4_0 embedding kept for onnx-genai's
sidecar), so the package that compile used to write and `check` rejected is built again.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from mtpc.cli.main import main
from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.pipeline import driver
from mtpc.pipeline.driver import build, check_contracts
from mtpc.spec import borrowed_weights
from tests.fixtures.arch import tiny_arch
from tests.fixtures.corrupt import misnaming_input_ids
from tests.fixtures.gguf_writer import write_gguf

REPO = Path(__file__).resolve().parents[2]
FINDING = "config.json:/speculator_config/embedding/name"


@pytest.fixture(scope="module")
def q4_embedding_gguf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gate") / "q4.gguf"
    # With a tokenizer: onnx-genai refuses a package without tokenizer.json, and lowering says so first.
    return write_gguf(path, tiny_arch(), types=(("token_embd.weight", QT.Q4_0),), tokenizer=True)


@pytest.fixture
def unguarded_spec(tmp_path, q4_embedding_gguf, monkeypatch) -> Path:
    """Issue 7's spec, with lowering's refusal of it switched off."""
    monkeypatch.setattr(borrowed_weights, "check", lambda spec, ir: ([], ()))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"mtpc: 1\nname: gate\nsource: {{gguf: {q4_embedding_gguf}}}\nquantization:\n  default: {{keep: source}}\n"
        "targets:\n  onnxruntime_genai: {}\n  onnx_genai: {}\n",
        encoding="utf-8",
    )
    return spec


def test_the_gate_turns_what_check_would_reject_into_an_internal_error(unguarded_spec):
    with pytest.raises(MtpcError) as caught:
        build(unguarded_spec)
    assert caught.value.exit_code is ExitCode.INTERNAL
    (diag,) = caught.value.diagnostics
    assert diag.path == FINDING
    assert diag.message.startswith("the package would fail `mtpc check`: 'model.embed_tokens.weight' is not an initializer")
    assert "stored quantized, as 'model.embed_tokens.weight_Q4'" in diag.message


def test_compile_writes_nothing_and_exits_3(unguarded_spec, tmp_path, capsys):
    out = tmp_path / "pkg"
    assert main(["compile", "-q", str(unguarded_spec), "-o", str(out)]) == int(ExitCode.INTERNAL)
    assert not out.exists()
    err = capsys.readouterr().err
    assert f"{FINDING}: error: the package would fail `mtpc check`" in err and "this is a bug in mtpc" in err


@pytest.mark.parametrize("verb", [["plan", "-q"], ["check"]])
def test_plan_and_check_of_a_spec_run_the_gate_on_the_graphs_io(monkeypatch, tmp_path, capsys, verb):
    """They build no graph: the configs are checked against the I/O contracts the graphs are built to
    (tests/emit/test_graph_files.py holds the two equal). What a graph holds (the borrowed embedding
    above) is checked by compile's gate, on the graphs it writes; lowering refuses issue 7's spec itself."""
    monkeypatch.setattr(driver, "EMITTERS", misnaming_input_ids(driver.EMITTERS))
    monkeypatch.chdir(tmp_path)
    assert main([*verb, str(REPO / "specs" / "qwen35-tiny-mtp.yaml")]) == int(ExitCode.INTERNAL)
    err = capsys.readouterr().err
    assert "genai_config.json:/model/decoder/inputs/input_ids" in err and "'input_idz' is not an input of model.onnx" in err


def test_check_of_a_spec_leaves_what_the_graphs_hold_to_compile(unguarded_spec):
    # Not a virtue, the price of not building the graphs: compile (above) is the gate that catches this.
    assert main(["check", str(unguarded_spec)]) == int(ExitCode.OK)


def test_the_gate_measures_data_files_without_producing_them():
    with build(REPO / "specs" / "qwen35-tiny-mtp.yaml") as built:
        streamed = [a for a in built.artifacts if a.chunks is not None]
        assert streamed and all(a.size == len(a.read()) for a in streamed)

        def unread():
            raise AssertionError("the contract checks read weight data")

        check_contracts([replace(a, chunks=unread) if a.chunks is not None else a for a in built.artifacts])


def test_a_data_file_shorter_than_its_layout_is_caught_in_memory():
    with build(REPO / "specs" / "qwen35-tiny-mtp.yaml") as built:
        short = [replace(a, size=a.size - 1) if a.relpath == "model.onnx.data" else a for a in built.artifacts]
        with pytest.raises(MtpcError) as caught:
            check_contracts(short)
    assert caught.value.exit_code is ExitCode.INTERNAL
    assert any(d.path == "model.onnx.data:/" and "truncated?" in d.message for d in caught.value.diagnostics)
