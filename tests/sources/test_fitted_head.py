"""`source.synthetic.mtp_head: fitted`: the compiler's own fitted head (`mtpc.sources.fitted_head`).

Its drafts are measured with the numpy rendition of greedy speculative decoding (tests/fixtures/fitted_head.py's
`simulate_speculative`, written apart from the fit), on the prompts verify and tune decode by default. The ids of
tune's prompts come from the `tokenizers` library reading the package's own tokenizer.json, not from the
compiler's `encode`, which is held to it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tokenizers import Tokenizer

from mtpc.ir import SourceRef, SyntheticSpec
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from mtpc.sources import synthetic
from mtpc.sources.fitted_head import _fitted_canonical, default_prompts, fitted_store, steps_per_prompt
from mtpc.sources.random_weights import seeded_store
from mtpc.sources.synthetic_tokenizer import encode, synthetic_tokenizer_files
from mtpc.util.decoding_defaults import TUNE_PROMPTS, VERIFY_DRAFT_TOKENS, VERIFY_NEW_TOKENS, VERIFY_PROMPT
from tests.fixtures.arch import tiny_arch
from tests.fixtures.fitted_head import simulate_speculative

ARCH = tiny_arch()


def test_encode_gives_the_ids_of_the_packages_tokenizer():
    tokenizer = Tokenizer.from_str(dict(synthetic_tokenizer_files(ARCH))["tokenizer.json"].decode("utf-8"))
    for text in TUNE_PROMPTS:
        assert encode(ARCH, text) == tuple(tokenizer.encode(text).ids)


def test_a_vocabulary_without_a_prompts_bytes_leaves_that_prompt_out():
    small = replace(ARCH, vocab_size=40)  # 37 byte ids: no lower-case letters, no verify prompt (id 99)
    assert encode(small, "def") is None
    assert default_prompts(small) == ()
    assert default_prompts(ARCH)[0] == VERIFY_PROMPT and len(default_prompts(ARCH)) == 1 + len(TUNE_PROMPTS)


@pytest.fixture(scope="module")
def fitted():
    store = fitted_store(ARCH, seed=0, norm_weight_scale=0.1)
    return Qwen35Reference(ARCH, store), MtpHeadReference(ARCH, store)


def test_verify_defaults_see_most_drafts_accepted(fitted):
    main, head = fitted
    run = simulate_speculative(main, head, list(VERIFY_PROMPT), VERIFY_NEW_TOKENS, VERIFY_DRAFT_TOKENS)
    assert run.tokens == main.greedy(list(VERIFY_PROMPT), VERIFY_NEW_TOKENS)
    assert run.drafted > 0 and run.accepted / run.drafted >= 0.5


def test_tunes_prompts_see_drafts_accepted_where_they_are_memorised(fitted):
    main, head = fitted
    steps = steps_per_prompt(ARCH, len(default_prompts(ARCH)))
    for text in TUNE_PROMPTS:
        run = simulate_speculative(main, head, list(encode(ARCH, text)), steps, 1)
        assert run.accepted >= run.drafted // 2, text


def test_the_random_head_is_left_for_random():
    """A random head (the default of `mtp_head`) is the seeded store as before, and its drafts are never right
    along verify's prompt: the fitted head is what makes them so."""
    random = seeded_store(ARCH, 0)
    ref = SourceRef("synthetic", seed=0, synthetic=SyntheticSpec(ARCH, full_attention_interval=2, norm_weight_scale=0.1))
    opened = synthetic.open_weights(ref, synthetic.describe(ref))
    assert all(np.array_equal(opened.read(n), random.read(n)) for n in random.names())
    run = simulate_speculative(Qwen35Reference(ARCH, random), MtpHeadReference(ARCH, random), list(VERIFY_PROMPT),
                               VERIFY_NEW_TOKENS, VERIFY_DRAFT_TOKENS)
    assert run.accepted == 0
    store = fitted_store(ARCH, seed=0, norm_weight_scale=0.1)
    changed = {n for n in random.names() if not np.array_equal(store.read(n), random.read(n))}
    assert changed and all(n.startswith("mtp.") for n in changed)


def test_the_fit_is_the_same_every_time():
    first = _fitted_canonical.__wrapped__(ARCH, 0, 0.1)
    again = _fitted_canonical.__wrapped__(ARCH, 0, 0.1)
    assert first.keys() == again.keys()
    assert all(first[n].tobytes() == again[n].tobytes() for n in first)


def test_fitted_is_refused_where_there_is_no_dense_qwen35_head():
    for arch in (replace(ARCH, mtp_num_layers=0), replace(ARCH, family="glm4moe")):
        problems = synthetic.problems(SyntheticSpec(arch, full_attention_interval=2, norm_weight_scale=0.1, mtp_head="fitted"))
        assert [where for where, _ in problems] == [("mtp_head",)]
