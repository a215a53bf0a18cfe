"""The same package's text view (`text_overlay.json` over its genai_config.json, loaded with og.Config.overlay)
drafts with the MTP head: og.MtpGenerator gives og's greedy tokens, which are transformers', for N = 1..4 draft
tokens, on the dense and the MoE release. The head's drafts are all rejected here (its weights are random), so
every round takes og's rollback path through the windowed state."""

from __future__ import annotations

import pytest
import torch

from mtpc.profiles.ort_genai import text_view_config
from tests.runtime import decoding

STEPS = 16
PROMPT = [76, 111, 111, 107, 258, 32, 259, 116, 97]  # "Look the inta", byte-level BPE ids


@pytest.fixture(scope="module")
def text_views(packages):
    import onnxruntime_genai as og

    views = {}

    def view(family):
        if family not in views:
            package = packages[(family, "mtp")]
            views[family] = (og.Model(text_view_config(og, package)), og.Model(str(package / "mtp")))
        return views[family]

    return view


@pytest.mark.parametrize("family", ["dense", "moe"])
def test_mtp_generator_equals_greedy_equals_transformers(text_views, releases, family):
    main, head = text_views(family)
    greedy = decoding.greedy(main, PROMPT, STEPS)
    with torch.no_grad():
        want = releases[(family, True)].model.generate(
            input_ids=torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
            max_new_tokens=STEPS, do_sample=False)[0, len(PROMPT):].tolist()
    assert len(greedy) == STEPS and greedy == want
    for n in (1, 2, 3, 4):
        drafted = decoding.speculative(main, head, PROMPT, STEPS, n)
        assert drafted.tokens == greedy, n
        assert drafted.proposed > 0
