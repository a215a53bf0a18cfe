"""The metadata verbs on GLM-4.7-Flash's shape as a GGUF (`sparse_gguf`: 47 blocks + the nextn block, 64 experts,
a 154,880-token vocabulary, ~33 GB claimed, no weight byte): `inspect`, `check SPEC`, `plan` and `diff` of two
specs answer from the header; reading any tensor's bytes fails the test. The older form without the nextn
block (block_count 47) reads text-only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from mtpc.cli.main import main
from mtpc.ir import SourceRef, TokenIds
from mtpc.sources.gguf import reader as gguf
from mtpc.sources.gguf.header import GGUFHeader
from tests.fixtures.deepseek2_checkpoints import FLASH
from tests.runtime.conftest import write_spec

from . import sparse_gguf

INT4 = "quantization:\n  default: {bits: 4, block_size: 32}\n"


@pytest.fixture(scope="module")
def flash(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("flash-gguf")
    return {"nextn": sparse_gguf.write(folder / "flash.gguf"),
            "text": sparse_gguf.write(folder / "flash-no-nextn.gguf", nextn=False)}


@pytest.fixture(autouse=True)
def no_weight_bytes(monkeypatch):
    def refuse(self, info):
        raise AssertionError(f"{info.name}: a weight's bytes were read")

    monkeypatch.setattr(GGUFHeader, "data", refuse)


def test_the_architecture_is_glm_4_7_flash(flash):
    arch = gguf.describe(SourceRef("gguf", str(flash["nextn"]))).architecture
    tokens = TokenIds(bos=sparse_gguf.BOS, eos=(sparse_gguf.EOS, sparse_gguf.EOT, sparse_gguf.EOM), pad=sparse_gguf.EOS)
    assert arch == replace(FLASH, tokens=tokens)  # the HF fixture's shape; GGUF's bos is [gMASK] (_set_vocab_glm)


def test_inspect_reads_no_weight(flash, capsys):
    assert main(["inspect", str(flash["nextn"])]) == 0
    out = capsys.readouterr().out
    for line in ("architecture:       deepseek2",
                 "experts:            64 experts, top-4 (sigmoid, selection bias, renormalized, scaled by 1.8), expert "
                 "FFN 1536, shared expert 1536; the first 1 layer(s) dense",
                 "attention:          20 heads, multi-head latent attention (q LoRA 768, kv "
                 "LoRA 512, per head nope 192 + rope 64, v 256; caches a 576-wide latent)",
                 "mtp head:           yes, 1 layer(s), a trailing decoder layer (block 47, after the trunk)"):
        assert line in out, out


def test_a_gguf_without_its_nextn_block_inspects_text_only(flash, capsys):
    arch = gguf.describe(SourceRef("gguf", str(flash["text"]))).architecture
    assert (arch.mtp_num_layers, arch.unusable_head.absent, arch.num_layers) == (0, True, 47)
    assert main(["inspect", str(flash["text"])]) == 0
    assert "mtp head:           no" in capsys.readouterr().out


@pytest.mark.parametrize("verb", ["plan", "check"])
def test_plan_and_check_read_no_weight(flash, tmp_path, capsys, verb):
    spec = write_spec(tmp_path / "flash.yaml", "flash", f"{{gguf: {flash['nextn']}}}", INT4)
    code = main([verb, str(spec)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    if verb == "plan":
        for line in ("model: deepseek2 (gguf source), 47 layers (47 full attention)",
                     "141 experts Q8_0 -> int4 QMoE block 32 accuracy 4 (lossy)",
                     # kv_b_proj from attn_k_b / attn_v_b: dequantized on read, stored as the float halves
                     "48 tensor Q8_0 -> float32 (lossless): layers.*.self_attn.kv_b_proj.weight",
                     "  mtp head: 1 block, a trailing decoder layer (DeepSeek-V3 / GLM-4.5 layout)"):
            assert line in out, out


def test_diff_of_two_specs_reads_no_weight(flash, tmp_path, capsys):
    a = write_spec(tmp_path / "a.yaml", "flash", f"{{gguf: {flash['nextn']}}}", INT4)
    b = write_spec(tmp_path / "b.yaml", "flash", f"{{gguf: {flash['nextn']}}}", INT4.replace("bits: 4", "bits: 8"))
    assert main(["diff", str(a), str(a)]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "int8" in out or "bits" in out, out
