"""`mtpc inspect` on the shared checkpoint fixtures: what the architecture fixture says they hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtpc.cli.main import main
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import write_gguf


@pytest.mark.parametrize("with_mtp", [True, False])
def test_inspect_hf_checkpoint_json(tmp_path, capsys, with_mtp):
    arch = tiny_arch(mtp_num_layers=1 if with_mtp else 0)
    ckpt = write_hf_checkpoint(tmp_path / "ckpt", arch, seed=0, with_mtp=with_mtp)
    assert main(["inspect", "--format", "json", str(ckpt)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format_version"] == 1 and doc["source"]["kind"] == "hf"
    assert doc["has_mtp_head"] is with_mtp
    got = doc["architecture"]
    assert (got["hidden_size"], got["num_attention_heads"], got["num_key_value_heads"], got["vocab_size"]) == (64, 4, 2, 256)
    assert got["layer_kinds"] == ["linear_attention", "full_attention", "linear_attention", "full_attention"]
    assert doc["storage"]  # storage types per tensor group are listed


def test_inspect_gguf_text(tmp_path, capsys):
    path = write_gguf(tmp_path / "tiny.gguf", tiny_arch(), seed=0, with_mtp=True)
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "layers:             4 (2 full_attention, 2 linear_attention)" in text
    assert "layer kinds:        linear full linear full" in text
    assert "mtp head:           yes, 1 layer(s)" in text
    assert "format:             GGUF v3" in text
    assert "mtp_shares:         mtp.embed_tokens.weight, mtp.lm_head.weight" in text
    # one column: every `key: value` line (the storage list aside) starts its value at the same place
    keyed = [line for line in text.splitlines() if not line.startswith(" ") and not line.endswith(":")]
    assert len({len(line) - len(line.split(":", 1)[1].lstrip()) for line in keyed}) == 1, keyed


def test_inspect_gguf_json_lists_are_lists(tmp_path, capsys):
    path = write_gguf(tmp_path / "tiny.gguf", tiny_arch(), seed=0, with_mtp=True)
    assert main(["inspect", "--format", "json", str(path)]) == 0
    facts = json.loads(capsys.readouterr().out)["facts"]
    assert facts["mtp_shares"] == ["mtp.embed_tokens.weight", "mtp.lm_head.weight"]


def test_inspect_of_a_compiled_package_points_to_check_and_verify(tmp_path, capsys):
    spec = Path(__file__).resolve().parents[2] / "specs" / "qwen35-tiny-mtp.yaml"
    assert main(["compile", "-q", str(spec), "-o", str(tmp_path / "pkg")]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "pkg")]) == 2
    err = capsys.readouterr().err
    assert "this is a compiled package; use mtpc check" in err and "mtpc verify" in err
    assert "architectures" not in err


def test_inspect_rejects_what_is_not_a_checkpoint(tmp_path, capsys):
    (tmp_path / "weights.bin").write_bytes(b"\0")
    assert main(["inspect", str(tmp_path / "weights.bin")]) == 2
    assert main(["inspect", str(tmp_path)]) == 2
    assert "neither a .gguf file nor a checkpoint directory" in capsys.readouterr().err


# A head the checkpoint declares but that is broken is a finding (exit 1), in the words compile refuses it with
# (`sources/mtp_head.py` is the one verdict); a head whose weights transformers dropped is a note (exit 0).

ARCH = tiny_arch()
HEAD = f"blk.{ARCH.num_layers}."


def _inspect(capsys, path) -> tuple[int, str, dict]:
    code = main(["inspect", str(path)])
    text = capsys.readouterr()
    assert main(["inspect", "--format", "json", str(path)]) == code
    return code, text.err, json.loads(capsys.readouterr().out)


def _head_tensors_of(path) -> list[str]:
    from mtpc.sources.gguf.layout import open_header

    return [n for n in open_header(str(path)).tensors if n.startswith(HEAD)]


@pytest.mark.parametrize(
    "omit, says",
    [
        ((f"{HEAD}nextn.hnorm.weight",), f"its MTP head is incomplete: 1 of its 14 tensors are missing: {HEAD}nextn.hnorm.weight"),
        ("all", f"qwen35.nextn_predict_layers is 1, naming {HEAD[:-1]} as the head block, but the file holds none of "
                "that block's tensors"),
    ],
    ids=["a-tensor-missing", "the-named-block-missing"],
)
def test_inspect_of_a_gguf_with_a_broken_head_is_a_finding(tmp_path, capsys, omit, says):
    whole = write_gguf(tmp_path / "whole.gguf", ARCH, seed=3)
    omit = tuple(_head_tensors_of(whole)) if omit == "all" else omit
    path = write_gguf(tmp_path / "m.gguf", ARCH, seed=3, omit=omit)
    code, err, doc = _inspect(capsys, path)
    assert code == 1
    assert err.splitlines() == [f"error: {path}: the MTP head cannot be built: {says}"]
    assert doc["ok"] is False and doc["has_mtp_head"] is False
    assert doc["findings"] == [f"{path}: the MTP head cannot be built: {says}"]


def test_inspect_of_an_hf_folder_with_half_a_head_is_a_finding(tmp_path, capsys):
    from tests.sources.test_mtp_head import _rewrite_hf

    ckpt = _rewrite_hf(write_hf_checkpoint(tmp_path / "hf", ARCH, seed=1), drop=("mtp.fc.weight", "mtp.norm.weight"))
    code, err, doc = _inspect(capsys, ckpt)
    assert code == 1
    says = "its MTP head is incomplete: 2 of its 15 tensors are missing: mtp.fc.weight, mtp.norm.weight"
    assert err.splitlines() == [f"error: {ckpt}: the MTP head cannot be built: {says}"]
    assert doc["findings"] == [f"{ckpt}: the MTP head cannot be built: {says}"]


def test_inspect_of_an_hf_folder_whose_head_transformers_dropped_is_a_note(tmp_path, capsys):
    from tests.sources.test_mtp_head import _rewrite_hf

    ckpt = _rewrite_hf(write_hf_checkpoint(tmp_path / "hf", ARCH, seed=1, with_mtp=False), mtp_num_hidden_layers=1)
    code, err, doc = _inspect(capsys, ckpt)
    assert code == 0 and err == "" and doc["findings"] == []
    assert doc["facts"]["mtp_note"].endswith("(transformers drops them when it re-saves a model)")
