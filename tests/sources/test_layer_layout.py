"""One rule for layer kinds: the per-layer list wins, the interval is the fallback, contradictions are refused."""

from __future__ import annotations

import json
import pytest

from mtpc.cli.main import main
from mtpc.util.diagnostics import SourceError
from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf_source
from mtpc.sources.hf import reader as hf_source
from mtpc.sources.layer_layout import Declared, layer_kinds
from tests.fixtures.arch import FULL, LINEAR, tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import write_gguf

ARCH = tiny_arch()  # linear, full, linear, full: interval 2


def test_the_list_wins_when_there_is_no_interval():
    kinds = (LINEAR, LINEAR, FULL, FULL)
    assert layer_kinds("m", 4, per_layer=Declared("types", kinds), interval=None) == kinds


def test_the_interval_is_the_fallback_and_4_the_default():
    assert layer_kinds("m", 4, per_layer=None, interval=Declared("iv", 2)) == (LINEAR, FULL, LINEAR, FULL)
    assert layer_kinds("m", 4, per_layer=None, interval=None) == (LINEAR, LINEAR, LINEAR, FULL)


def test_a_list_longer_than_the_trunk_is_cut_to_it():
    kinds = (LINEAR, FULL, FULL)  # the GGUF list covers the MTP block too
    assert layer_kinds("m", 2, per_layer=Declared("rl", kinds), interval=None) == (LINEAR, FULL)


def test_a_disagreeing_interval_is_refused_naming_both_keys():
    with pytest.raises(SourceError) as err:
        layer_kinds("m.gguf", 4, per_layer=Declared("rl", (LINEAR, FULL, LINEAR, FULL)), interval=Declared("iv", 3))
    assert str(err.value.diagnostics[0].message) == (
        "m.gguf: rl and iv disagree: rl makes layers [1, 3] full attention, iv = 3 makes layers [2] full attention; "
        "fix or remove one of them"
    )


def test_the_converters_placeholder_interval_is_not_held_against_the_list():
    kinds = (LINEAR, FULL, LINEAR, FULL)
    got = layer_kinds("m", 4, per_layer=Declared("rl", kinds), interval=Declared("iv", 4), placeholder_interval=4)
    assert got == kinds


@pytest.mark.parametrize("value", [0, -2, True, "2"])
def test_an_interval_must_be_a_positive_integer(value):
    with pytest.raises(SourceError, match="iv must be a positive integer"):
        layer_kinds("m", 4, per_layer=None, interval=Declared("iv", value))


# ----------------------------------------------------------------------------- GGUF


def _describe_gguf(path) -> tuple:
    return gguf_source.describe(SourceRef("gguf", str(path))).architecture.layer_kinds


def test_gguf_recurrent_layers_win_over_the_converters_interval_of_4(tmp_path):
    # What llama.cpp's converter writes for an HF config with layer_types and no interval key.
    path = write_gguf(tmp_path / "c.gguf", ARCH, seed=3, recurrent_layers=True, full_attention_interval=4)
    assert _describe_gguf(path) == ARCH.layer_kinds


def test_gguf_recurrent_layers_alone(tmp_path):
    path = write_gguf(tmp_path / "c.gguf", ARCH, seed=3, recurrent_layers=True, full_attention_interval=None)
    assert _describe_gguf(path) == ARCH.layer_kinds


def test_gguf_interval_alone_still_works(tmp_path):
    assert _describe_gguf(write_gguf(tmp_path / "c.gguf", ARCH, seed=3)) == ARCH.layer_kinds


def test_gguf_with_the_wrong_number_of_flags_is_refused(tmp_path):
    path = write_gguf(tmp_path / "c.gguf", ARCH, seed=3, with_mtp=False, recurrent_layers=[True, False, True])
    with pytest.raises(SourceError, match=r"recurrent_layers has 3 entries, expected one per block \(4"):
        _describe_gguf(path)


def test_gguf_mtp_block_marked_recurrent_is_refused(tmp_path):
    path = write_gguf(tmp_path / "c.gguf", ARCH, seed=3, recurrent_layers=[True, False, True, False, True])
    with pytest.raises(SourceError, match="marks an MTP block as recurrent"):
        _describe_gguf(path)


def test_gguf_contradiction_is_a_positioned_spec_error(tmp_path, capsys):
    # interval 1 says every layer is full attention; the flags say two are linear.
    write_gguf(tmp_path / "m.gguf", ARCH, seed=3, recurrent_layers=True, full_attention_interval=1)
    spec = tmp_path / "spec.yaml"
    spec.write_text("mtpc: 1\nname: t\nsource:\n  gguf: m.gguf\ntargets:\n  onnx_genai: {}\n", encoding="utf-8")
    assert main(["check", str(spec)]) == 2
    err = capsys.readouterr()
    text = err.out + err.err
    assert f"{spec}:4:9: error: " in text, text
    assert (
        "qwen35.attention.recurrent_layers and qwen35.full_attention_interval disagree: "
        "qwen35.attention.recurrent_layers makes layers [1, 3] full attention, "
        "qwen35.full_attention_interval = 1 makes layers [0, 1, 2, 3] full attention"
    ) in text


# ----------------------------------------------------------------------------- HF


def _hf_with(tmp_path, **text_fields) -> tuple:
    directory = write_hf_checkpoint(tmp_path / "hf", ARCH, seed=3)
    config = json.loads((directory / "config.json").read_text())
    for key, value in text_fields.items():
        if value is None:
            config["text_config"].pop(key, None)
        else:
            config["text_config"][key] = value
    (directory / "config.json").write_text(json.dumps(config))
    return hf_source.describe(SourceRef("hf", str(directory))).architecture.layer_kinds


def test_hf_layer_types_without_interval(tmp_path):
    assert _hf_with(tmp_path, full_attention_interval=None) == ARCH.layer_kinds


def test_hf_interval_without_layer_types(tmp_path):
    assert _hf_with(tmp_path, layer_types=None, full_attention_interval=2) == ARCH.layer_kinds


def test_hf_disagreement_is_refused_naming_both_fields(tmp_path):
    # An HF config has no converter placeholder: an interval of 4 that contradicts layer_types is refused too.
    with pytest.raises(SourceError) as err:
        _hf_with(tmp_path, full_attention_interval=4)
    message = err.value.diagnostics[0].message
    assert "field text_config.layer_types and field text_config.full_attention_interval disagree" in message
