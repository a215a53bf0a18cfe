"""The package README: says what the package holds and how to run it, the same bytes every time."""

from __future__ import annotations

import json

import pytest
import yaml

from mtpc.emit.inference_metadata import emit_inference_metadata
from mtpc.emit.model_card import emit_model_card
from mtpc.ir import OnnxGenaiTarget
from tests.fixtures.arch import tiny_arch
from tests.passes.ir_factory import compiled


def card(ir) -> str:
    (artifact,) = emit_model_card(ir, None)
    assert artifact.relpath == "README.md" and artifact.schema is None
    return artifact.read().decode("utf-8")


def test_card_with_head_shows_how_to_run_speculative_decoding():
    text = card(compiled())
    assert text.startswith("# tiny\n")
    assert "4 layers: 2 full attention, 2 linear attention" in text
    assert "`mtp/mtp.onnx`" in text
    assert 'og.MtpGenerator(model, og.Model("mtp"), params)' in text
    assert "max_draft_tokens=4" in text
    assert "mtpc check ." in text


def test_card_is_deterministic_and_has_no_absolute_paths():
    a, b = card(compiled()), card(compiled())
    assert a == b
    assert "/tmp" not in a and "/work" not in a


def test_text_only_card_has_no_trace_of_mtp():
    text = card(compiled(arch=tiny_arch(mtp_num_layers=0)))
    assert "text only" in text
    assert "MTP" not in text and "mtp/" not in text and "MtpGenerator" not in text
    assert "og.Generator(model, params)" in text


def _onnx_genai_head_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if "the MTP head for onnx-genai" in line]
    return line


@pytest.mark.parametrize("layout", ["workflow", "flat"])
def test_card_names_where_the_metadata_layout_declares_the_onnx_genai_head(layout):
    # Where the declaration really is comes from the metadata emitter's files, not from the card.
    ir = compiled(ort=None, onnx_genai=OnnxGenaiTarget(layout=layout))
    files = {a.relpath: a.read() for a in emit_inference_metadata(ir, None)}
    line = _onnx_genai_head_line(card(ir))
    if layout == "workflow":
        assert "speculator_config" in json.loads(files["config.json"])
        assert "`config.json` (`speculator_config`)" in line and "speculative" not in line
    else:
        assert "config.json" not in files
        assert "speculative" in yaml.safe_load(files["inference_metadata.yaml"])
        assert "the `speculative:` block of `inference_metadata.yaml`" in line and "config.json" not in line


def _python_snippet(card: str) -> str:
    start = card.index("```python\n") + len("```python\n")
    return card[start : card.index("```", start)]


@pytest.mark.parametrize("spec", ["qwen35-tiny-mtp", "qwen35-tiny-nohead"])
def test_card_snippet_runs_in_the_compiled_package(spec, tmp_path, monkeypatch, capsys):
    """The card's own code must decode with the package it describes, as written."""
    from pathlib import Path

    from mtpc.driver import build
    from mtpc.output import write_package

    repo = Path(__file__).resolve().parents[2]
    package = tmp_path / spec
    write_package(build(repo / "specs" / f"{spec}.yaml").artifacts, package)
    snippet = _python_snippet((package / "README.md").read_text(encoding="utf-8"))
    monkeypatch.chdir(package)
    exec(compile(snippet, "README.md", "exec"), {"prompt_token_ids": [5, 6, 7, 8]})
    printed = capsys.readouterr().out
    tokens = [int(t) for t in printed.replace(",", " ").strip(" []\n").split()]
    assert tokens[:4] == [5, 6, 7, 8] and len(tokens) == 64  # the card's max_length
