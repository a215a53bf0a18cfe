"""The head's draft-side options on the tiny Qwen3.5-MoE (HF release checkpoint and llama.cpp's GGUF of it):
og.MtpGenerator keeps the greedy tokens, drafts are accepted and rejected, and with a float draft vocabulary
the counters equal the numpy rendition's whose head scores the same tokens."""

from __future__ import annotations

import pytest

from mtpc.pipeline.driver import build_ir
from mtpc.reference.forward import MtpHeadReference
from mtpc.weights.draft import WithOwnLmHead
from tests.fixtures.fitted_head import PROMPTS
from tests.fixtures.moe_checkpoints import fitted_moe_store
from tests.runtime import decoding
from tests.runtime.conftest import write_spec

from tests.runtime.decoding import check_speculative

from .conftest import compile_moe

# The HF release has no tokenizer (ids rank in order) and the GGUF's is the tiny byte-level one without
# merges (its tokens rank in id order too): either way the first 160 ids, specials 0-2 among them.
DRAFT_IDS = tuple(range(160))
OPTIONS = {
    "vocabulary": "mtp:\n  draft_vocabulary: {size: 160}\n",
    "vocabulary-int8": "mtp:\n  draft_vocabulary: {size: 160}\n"
                       "quantization:\n  overrides:\n    - {match: mtp.lm_head.weight, bits: 8}\n",
    # The head's own full LM head, int8 (`mtp.lm_head: own` alone).
    "own-int8": "mtp:\n  lm_head: own\nquantization:\n  overrides:\n    - {match: mtp.lm_head.weight, bits: 8}\n",
    # Draft-side precision: every weight only the head reads int8 (its routed experts in QMoE), the main model float.
    "draft-side-int8": "mtp:\n  lm_head: own\nquantization:\n  overrides:\n    - {match: 'mtp.*', bits: 8}\n",
}


@pytest.fixture(scope="module")
def draft_models(moe_workdir, moe_release, moe_gguf):
    sources = {"hf": f"{{hf: {moe_release.name}}}", "gguf": f"{{gguf: {moe_gguf.name}}}"}
    built = {}
    for source, value in sources.items():
        for option, extra in OPTIONS.items():
            name = f"moe-draft-{source}-{option}"
            ir, _ = build_ir(write_spec(moe_workdir / f"{name}.yaml", name, value, extra))
            if option == "vocabulary":
                assert ir.mtp.draft_vocabulary.ids == DRAFT_IDS
            out = compile_moe(moe_workdir, name, value, extra)
            built[(source, option)] = decoding.load(out), decoding.load(out / "mtp")
    return built


@pytest.fixture(scope="module")
def moe_draft_head_reference(moe_arch):
    return MtpHeadReference(moe_arch, WithOwnLmHead(fitted_moe_store(moe_arch), DRAFT_IDS), draft_vocabulary=DRAFT_IDS)


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_moe_draft_vocabulary_keeps_greedy(draft_models, moe_transformers_greedy, moe_reference,
                                           moe_draft_head_reference, source, prompt, max_draft):
    check_speculative(draft_models[(source, "vocabulary")], moe_transformers_greedy[prompt], moe_reference,
                      moe_draft_head_reference, prompt, max_draft)


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("option", ["vocabulary-int8", "own-int8", "draft-side-int8"])
@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_moe_int8_draft_lm_head_keeps_greedy(draft_models, moe_transformers_greedy, source, option, prompt, max_draft):
    from tests.runtime.conftest import STEPS

    run = decoding.speculative(*draft_models[(source, option)], list(prompt), STEPS, max_draft)
    assert run.tokens == moe_transformers_greedy[prompt]
    assert run.accepted > 0 and run.rejected > 0, run
