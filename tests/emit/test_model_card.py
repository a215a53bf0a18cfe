"""The package README: says what the package holds and how to run it, the same bytes every time."""

from __future__ import annotations

from mtpc.emit.model_card import emit_model_card
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
