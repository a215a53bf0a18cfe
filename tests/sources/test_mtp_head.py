"""The MTP head is built only when it is whole: one block, every tensor, nothing unknown (HF and GGUF alike).

Messages are pinned exactly: they are what a user reads when a download is damaged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mtpc.cli.main import main
from mtpc.util.diagnostics import MtpcError
from mtpc.pipeline.driver import build_ir
from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf_source
from mtpc.sources.hf import reader as hf_source
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import write_gguf
from tests.fixtures.safetensors_writer import write_safetensors

ARCH = tiny_arch()
HEAD = f"blk.{ARCH.num_layers}."


def _spec(tmp_path, source: str, head: str = "auto"):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"mtpc: 1\nname: t\nsource:\n  {source}\nmtp: {{head: {head}}}\n"
        'targets:\n  onnxruntime_genai: {version: "0.18.0", execution_provider: cpu, attention: dense}\n',
        encoding="utf-8",
    )
    return spec


def _refusal(spec) -> str:
    with pytest.raises(MtpcError) as err:
        build_ir(spec)
    (diag,) = err.value.diagnostics
    return diag.message


# ----------------------------------------------------------------------------- HF


def _rewrite_hf(directory, *, drop=(), add=None, **text_fields):
    from mtpc.sources.hf.safetensors import SafetensorsFile

    st = SafetensorsFile(directory / "model.safetensors")
    tensors = {n: np.array(st.read(n)) for n in st.names() if n not in drop}
    st.close()
    tensors.update(add or {})
    write_safetensors(directory / "model.safetensors", tensors)
    config = json.loads((directory / "config.json").read_text())
    config["text_config"].update(text_fields)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture
def hf_dir(tmp_path):
    return write_hf_checkpoint(tmp_path / "hf", ARCH, seed=1)


def test_hf_two_mtp_layers_are_refused(tmp_path, hf_dir):
    _rewrite_hf(hf_dir, mtp_num_hidden_layers=2)
    assert _refusal(_spec(tmp_path, "hf: hf")) == (
        "[head-detection] the source's MTP head cannot be built: config.json field "
        "text_config.mtp_num_hidden_layers is 2: mtpc builds exactly one MTP block "
        "(as onnxruntime-genai's head projection and mobius do)"
    )


def test_hf_two_mtp_layers_build_text_only_with_head_off(tmp_path, hf_dir):
    _rewrite_hf(hf_dir, mtp_num_hidden_layers=2)
    ir, _ = build_ir(_spec(tmp_path, "hf: hf", head="off"))
    assert not ir.mtp.emit_head and not ir.heads


def test_hf_half_present_head_is_refused_with_head_auto(tmp_path, hf_dir):
    _rewrite_hf(hf_dir, drop=("mtp.fc.weight", "mtp.norm.weight"))
    assert _refusal(_spec(tmp_path, "hf: hf")) == (
        "[head-detection] the source's MTP head cannot be built: its MTP head is incomplete: 2 of its 15 tensors "
        "are missing: mtp.fc.weight, mtp.norm.weight"
    )


def test_hf_half_present_head_is_described_consistently(hf_dir):
    _rewrite_hf(hf_dir, drop=("mtp.fc.weight",))
    info = hf_source.describe(SourceRef("hf", str(hf_dir)))
    facts = dict(info.facts)
    # The tensors are counted as they are; the head is not offered, and the note says why.
    assert facts["mtp_tensors"] == 14 and not info.has_mtp_head
    assert facts["mtp_note"] == "its MTP head is incomplete: 1 of its 15 tensors are missing: mtp.fc.weight"


def test_hf_head_on_with_absent_weights_gives_the_real_reason(tmp_path):
    directory = write_hf_checkpoint(tmp_path / "hf", ARCH, seed=1, with_mtp=False)
    _rewrite_hf(directory, mtp_num_hidden_layers=1)
    assert _refusal(_spec(tmp_path, "hf: hf", head="on")) == (
        "[head-detection] mtp.head is 'on' but the source ships no MTP head (config.json field "
        "text_config.mtp_num_hidden_layers is 1 but the weights hold none of the head's tensors "
        "(transformers drops them when it re-saves a model))"
    )


def test_hf_absent_head_weights_give_a_text_only_package_with_a_note(tmp_path):
    directory = write_hf_checkpoint(tmp_path / "hf", ARCH, seed=1, with_mtp=False)
    _rewrite_hf(directory, mtp_num_hidden_layers=1)
    ir, _ = build_ir(_spec(tmp_path, "hf: hf"))
    assert not ir.heads
    assert any(n.startswith("no MTP head: config.json field text_config.mtp_num_hidden_layers is 1") for n in ir.notes)


def test_hf_unknown_mtp_tensor_is_refused(tmp_path, hf_dir):
    _rewrite_hf(hf_dir, add={"mtp.layers.1.input_layernorm.weight": np.zeros(64, np.float32)})
    assert _refusal(_spec(tmp_path, "hf: hf")) == (
        "[head-detection] the source's MTP head cannot be built: it holds MTP head tensors mtpc does not know "
        "or that sit outside the head block: mtp.layers.1.input_layernorm.weight"
    )


def test_hf_head_tensors_without_a_declared_head_are_refused(tmp_path, hf_dir):
    _rewrite_hf(hf_dir, mtp_num_hidden_layers=0)
    message = _refusal(_spec(tmp_path, "hf: hf"))
    assert message.startswith("[head-detection] the source's MTP head cannot be built: it holds MTP head tensors (mtp.")
    assert message.endswith("but config.json field text_config.mtp_num_hidden_layers is 0")


# ----------------------------------------------------------------------------- GGUF


def test_gguf_missing_head_tensor_is_refused_by_name(tmp_path):
    write_gguf(tmp_path / "m.gguf", ARCH, seed=3, omit=(f"{HEAD}nextn.hnorm.weight",))
    assert _refusal(_spec(tmp_path, "gguf: m.gguf")) == (
        "[head-detection] the source's MTP head cannot be built: its MTP head is incomplete: 1 of its 14 tensors "
        f"are missing: {HEAD}nextn.hnorm.weight"
    )


def test_gguf_declaring_a_head_block_it_does_not_hold_is_refused(tmp_path):
    """The block count includes the head block: a GGUF naming one with none of its tensors is broken, not re-saved."""
    whole = gguf_source.describe(SourceRef("gguf", str(write_gguf(tmp_path / "whole.gguf", ARCH, seed=3))))
    head_tensors = tuple(t.name for t in whole.tensors if t.name.startswith("mtp."))
    assert head_tensors
    from mtpc.sources.gguf.layout import open_header

    omit = tuple(n for n in open_header(str(tmp_path / "whole.gguf")).tensors if n.startswith(HEAD))
    write_gguf(tmp_path / "m.gguf", ARCH, seed=3, omit=omit)
    assert _refusal(_spec(tmp_path, "gguf: m.gguf")) == (
        "[head-detection] the source's MTP head cannot be built: qwen35.nextn_predict_layers is 1, naming "
        f"{HEAD[:-1]} as the head block, but the file holds none of that block's tensors"
    )
    ir, _ = build_ir(_spec(tmp_path, "gguf: m.gguf", head="off"))  # the way out the refusal names
    assert not ir.heads


def test_gguf_two_nextn_blocks_are_refused(tmp_path):
    write_gguf(tmp_path / "m.gguf", ARCH, seed=3, nextn_blocks=2)
    assert _refusal(_spec(tmp_path, "gguf: m.gguf")) == (
        "[head-detection] the source's MTP head cannot be built: qwen35.nextn_predict_layers is 2: mtpc builds "
        "exactly one MTP block (as onnxruntime-genai's head projection and mobius do)"
    )


def test_gguf_unknown_nextn_tensor_is_refused(tmp_path):
    write_gguf(tmp_path / "m.gguf", ARCH, seed=3, replace={f"{HEAD}nextn.mystery.weight": np.zeros(64, np.float32)})
    assert _refusal(_spec(tmp_path, "gguf: m.gguf")) == (
        "[head-detection] the source's MTP head cannot be built: it holds MTP head tensors mtpc does not know "
        f"or that sit outside the head block: {HEAD}nextn.mystery.weight"
    )


def test_gguf_head_tensor_in_a_trunk_block_is_refused(tmp_path):
    write_gguf(tmp_path / "m.gguf", ARCH, seed=3, replace={"blk.1.nextn.enorm.weight": np.ones(64, np.float32)})
    assert _refusal(_spec(tmp_path, "gguf: m.gguf")).endswith("outside the head block: blk.1.nextn.enorm.weight")


def test_gguf_head_tensors_with_nextn_0_are_refused(tmp_path):
    extra = {f"{HEAD}nextn.eh_proj.weight": np.zeros((64, 128), np.float32)}
    write_gguf(tmp_path / "m.gguf", ARCH, seed=3, with_mtp=False, replace=extra)
    assert _refusal(_spec(tmp_path, "gguf: m.gguf")) == (
        "[head-detection] the source's MTP head cannot be built: it holds MTP head tensors "
        f"({HEAD}nextn.eh_proj.weight) but qwen35.nextn_predict_layers is 0"
    )


def test_gguf_head_refusal_points_at_the_source_and_names_the_way_out(tmp_path, capsys):
    write_gguf(tmp_path / "m.gguf", ARCH, seed=3, omit=(f"{HEAD}nextn.hnorm.weight",))
    spec = _spec(tmp_path, "gguf: m.gguf")
    assert main(["check", str(spec)]) == 1
    text = capsys.readouterr().out
    assert f"{spec}:4:9: error: [head-detection] the source's MTP head cannot be built" in text, text
    assert "set mtp.head to 'off' for a text-only package" in text


def test_gguf_without_shared_head_norm_falls_back_to_output_norm(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", ARCH, seed=3, omit=(f"{HEAD}nextn.shared_head_norm.weight",))
    ref = SourceRef("gguf", str(path))
    info = gguf_source.describe(ref)
    assert info.has_mtp_head
    assert info.notes == (
        f"the GGUF has no {HEAD}nextn.shared_head_norm.weight: the MTP head uses output_norm.weight in its place",
    )
    store = gguf_source.open_weights(ref, info)
    np.testing.assert_array_equal(store.read_float("mtp.norm.weight"), seeded_store(ARCH, 3).read_float("norm.weight"))
    ir, _ = build_ir(_spec(tmp_path, "gguf: m.gguf"))
    assert info.notes[0] in ir.notes  # compile and plan print it
