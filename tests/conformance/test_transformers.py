"""Every family from its Hugging Face release: onnxruntime-genai decodes as transformers, and MTP as greedy.

The oracles are transformers' own model of the family (greedy tokens of 20 steps; it drops the MTP head)
and the numpy rendition of greedy speculative decoding with the fitted head
(`fitted_head.simulate_speculative`) for og.MtpGenerator's draft counters, with drafts both accepted and
rejected at every draft count 1..4, so the head's drafts are really used.
"""

from __future__ import annotations

import pytest

from mtpc.cli.main import main
from tests.runtime import decoding
from tests.runtime.conftest import STEPS
from tests.runtime.decoding import check_speculative

from .families import FAMILIES, family, simulated

PROMPT_INDEX = (0, 1)


@pytest.mark.parametrize("index", PROMPT_INDEX)
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_greedy_equals_transformers(hf_models, transformers_greedy, name, index):
    fam = family(name)
    prompt = fam.prompts[index]
    tokens = decoding.greedy(hf_models[name][0], list(prompt), STEPS)
    assert tokens == transformers_greedy[name][prompt]
    assert tokens == fam.references[0].greedy(list(prompt), STEPS)


MTP_CASES = [(n, i, d) for n in sorted(FAMILIES) for i in PROMPT_INDEX for d in family(n).draft_counts]


@pytest.mark.parametrize("name, index, max_draft", MTP_CASES)
def test_mtp_decoding_equals_greedy(hf_models, transformers_greedy, name, index, max_draft):
    fam = family(name)
    prompt = fam.prompts[index]
    check_speculative(hf_models[name], transformers_greedy[name][prompt], *fam.references, prompt, max_draft,
                      expected=simulated(name, prompt, STEPS, max_draft))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_graphs_match_the_reference(conformance_dir, hf_packages, name, capsys):
    package = hf_packages[name]
    assert main(["verify", str(package), "--spec", str(conformance_dir / f"hf-{name}.yaml")]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    for line in ("main prefill logits", "main step logits", "mtp head logits", "mtp head hidden state"):
        assert f"ok   {line}:" in out, out
