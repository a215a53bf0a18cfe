"""MiMo-V2-Flash's three chained MTP layers (`model.mtp.layers.{0,1,2}`): the package drafts every position with the
first, as onnxruntime-genai drives one head graph (docs/chained-heads.md) and as vLLM's `mimo_v2_mtp.py` serves it
(one layer, `spec_step_idx % 1`); SGLang chains all three. The fixture's layers are fitted to different steps, so:

- og.MtpGenerator decodes, drafts and accepts exactly as the numpy rendition of the first layer chained on itself;
- the checkpoint's chain (layer k at position k) accepts otherwise, so the two are told apart.

llama.cpp's runtime drafts no MiMo-V2-Flash head (its mimo2 MTP graph wants a fused `attn_qkv`; V2-Flash stores
q/k/v apart), so there is no third oracle here as there is for Step-3.5.
"""

from __future__ import annotations

from tests.fixtures.chained_heads import assert_first_layer_at_every_position
from tests.fixtures.mimo2_checkpoints import PROMPTS

STEPS, DRAFTS = 30, 3


def test_the_package_drafts_with_its_first_mtp_layer_at_every_position(models, arch, store, main_reference):
    assert_first_layer_at_every_position(models, arch, store, main_reference, PROMPTS, STEPS, DRAFTS)


def test_the_model_card_and_plan_say_what_the_package_does(package, mimo_dir, capsys):
    from mtpc.cli.main import main
    from mtpc.tuning.package import draft_note

    assert "the first of the source's 3 chained MTP layers, run at every draft position" in draft_note(package)
    card = (package / "README.md").read_text("utf-8")
    # 6 layers (the head's included) x 2 x 2 cached KV heads x 24 x 4 bytes x 32768 tokens = 72 MiB; the windows
    # alone: the 2 full layers' 24 MiB and 4 sliding layers x 8 tokens.
    assert "KV cache per sequence at 32,768 tokens: 72 MiB (float32; 6 layers with the head)" in card
    assert "caches of the windows alone would hold 24 MiB; layers of 1 KV heads cache each 2 times" in card
    assert main(["plan", str(mimo_dir / "mimo.yaml")]) == 0
    out = capsys.readouterr().out
    assert "mtp head: 1 block (the first of 3 chained)" in out
