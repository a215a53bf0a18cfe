"""og.MtpGenerator on CPU with the compiled head: exactly the greedy tokens, with drafts both kept and refused.

The fitted head makes some drafts right and some wrong (tests/fixtures/fitted_head.py),
so the counters show that the runtime really verifies drafts from our head: a
head it ignored or misread would give no accepted drafts, a verifier that
accepted everything would emit tokens other than the greedy ones.
"""

from __future__ import annotations

import pytest

from tests.fixtures.fitted_head import PROMPTS, simulate_speculative

from . import decoding
from .conftest import STEPS


@pytest.fixture(scope="module")
def models(hf_package):
    return decoding.load(hf_package), decoding.load(hf_package / "mtp")


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_tokens_equal_greedy_with_accepted_and_rejected_drafts(
    models, reference, head_reference, reference_greedy, prompt, max_draft
):
    main, head = models
    run = decoding.speculative(main, head, list(prompt), STEPS, max_draft)
    assert run.tokens == reference_greedy[prompt]
    assert run.accepted > 0 and run.rejected > 0, run
    # The numpy head drafts the same tokens: as many proposed, as many accepted.
    expected = simulate_speculative(reference, head_reference, list(prompt), STEPS, max_draft)
    assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)



def test_head_and_main_load_one_copy_of_the_embedding_and_lm_head(hf_package, models, reference_greedy):
    """The package stores the shared weights once (in the head's folder, where onnxruntime lets the head
    reach them); both configs parse, both graphs load from those bytes, and MTP decoding stays lossless."""
    import onnx
    import onnxruntime_genai as og

    def locations(graph):
        model = onnx.load(str(graph), load_external_data=False)
        return {t.name: {e.key: e.value for e in t.external_data} for t in model.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL}

    main, head = locations(hf_package / "model.onnx"), locations(hf_package / "mtp" / "mtp.onnx")
    for name in ("model.embed_tokens.weight", "lm_head.MatMul.weight"):
        assert main[name]["location"] == "mtp/mtp.onnx.data" and head[name]["location"] == "mtp.onnx.data"
        assert (main[name]["offset"], main[name]["length"]) == (head[name]["offset"], head[name]["length"])
    assert all(e["location"] == "model.onnx.data" for n, e in main.items() if n not in
               ("model.embed_tokens.weight", "lm_head.MatMul.weight"))
    og.Config(str(hf_package))
    og.Config(str(hf_package / "mtp"))
    prompt = PROMPTS[0]
    run = decoding.speculative(*models, list(prompt), STEPS, 2)
    assert run.tokens == reference_greedy[prompt] == decoding.greedy(models[0], list(prompt), STEPS)
