"""The head's draft-side options keep MTP lossless: og.MtpGenerator gives exactly the greedy tokens.

A draft vocabulary (`mtp.draft_vocabulary`), a head LM head stored apart from the main
model's (`mtp.lm_head: own`, float or with its own quantization rule) and draft-side precision
(an override on `mtp.*`) change only what the head drafts;
the main model verifies every draft. With the fitted head (tests/fixtures/fitted_head.py) drafts
are both accepted and rejected, and with a float draft vocabulary (or a float own LM head) the
runtime's counters equal those of the numpy rendition whose head scores the same tokens.
"""

from __future__ import annotations

import pytest

from mtpc.pipeline.driver import build_ir
from mtpc.reference.forward import MtpHeadReference
from mtpc.weights.draft import WithOwnLmHead
from tests.fixtures.fitted_head import PROMPTS, fitted_store
from tests.fixtures.package_files import remanifest

from . import decoding
from .conftest import STEPS, compile_spec, write_spec

# A tokenizer-less source ranks its ids in order, specials (0-2) first: the draft vocabulary is 0..159,
# so the fitted head cannot draft the continuations' tokens 160-255 and rejects more.
DRAFT_SIZE = 160
DRAFT_IDS = tuple(range(DRAFT_SIZE))
VOCABULARY = f"mtp:\n  draft_vocabulary: {{size: {DRAFT_SIZE}}}\n"
INT8_HEAD = "quantization:\n  overrides:\n    - {match: mtp.lm_head.weight, bits: 8}\n"
# Draft-side precision: every weight only the head reads (`mtp.*`, its LM-head copy included) int8, the main model float.
INT8_DRAFT_SIDE = "mtp:\n  lm_head: own\nquantization:\n  overrides:\n    - {match: 'mtp.*', bits: 8}\n"
OPTIONS = {
    "own": "mtp:\n  lm_head: own\n",
    "vocabulary": VOCABULARY,
    "vocabulary-int8": VOCABULARY + INT8_HEAD,
    "own-int8": "mtp:\n  lm_head: own\n" + INT8_HEAD,
    "draft-side-int8": INT8_DRAFT_SIDE,
}


@pytest.fixture(scope="module")
def packages(workdir, fitted_hf, fitted_gguf):
    sources = {"hf": f"{{hf: {fitted_hf.name}}}", "gguf": f"{{gguf: {fitted_gguf.name}}}"}
    built = {}
    for source, value in sources.items():
        for option, extra in OPTIONS.items():
            spec = write_spec(workdir / f"draft-{source}-{option}.yaml", "fitted", value, extra)
            if option == "vocabulary":
                assert build_ir(spec)[0].mtp.draft_vocabulary.ids == DRAFT_IDS
            out = compile_spec(spec, workdir / f"pkg-draft-{source}-{option}")
            built[(source, option)] = decoding.load(out), decoding.load(out / "mtp")
    return built


@pytest.fixture(scope="module")
def draft_head_reference(arch):
    return MtpHeadReference(arch, WithOwnLmHead(fitted_store(arch), DRAFT_IDS), draft_vocabulary=DRAFT_IDS)


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_a_draft_vocabulary_keeps_greedy_tokens_and_drafts_what_the_reference_drafts(
    packages, reference, draft_head_reference, reference_greedy, source, prompt, max_draft
):
    decoding.check_speculative(packages[(source, "vocabulary")], reference_greedy[prompt], reference,
                               draft_head_reference, prompt, max_draft)


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_the_heads_own_float_lm_head_drafts_what_the_shared_one_does(
    packages, reference, head_reference, reference_greedy, source, prompt, max_draft
):
    """`mtp.lm_head: own` at the main model's precision: the same rows in another place, so the same drafts."""
    decoding.check_speculative(packages[(source, "own")], reference_greedy[prompt], reference, head_reference,
                               prompt, max_draft)


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("option", ["vocabulary-int8", "own-int8", "draft-side-int8"])
@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_an_int8_draft_lm_head_keeps_greedy_tokens(packages, reference_greedy, source, option, prompt, max_draft):
    run = decoding.speculative(*packages[(source, option)], list(prompt), STEPS, max_draft)
    assert run.tokens == reference_greedy[prompt]
    assert run.accepted > 0 and run.rejected > 0, run


def test_verify_checks_the_draft_vocabularys_logits_and_the_rest(workdir, packages, capsys):
    """`mtpc verify` compares the head's draft-vocabulary logits with the reference's (an int8 copy read as
    stored) and finds every other logit at the lowest value; a head whose table points elsewhere fails it."""
    import json
    import shutil

    import onnx

    from mtpc.cli.main import main
    from mtpc.graphs.mtp_head import DRAFT_POSITIONS

    spec, package = workdir / "draft-hf-vocabulary-int8.yaml", workdir / "pkg-draft-hf-vocabulary-int8"
    assert main(["verify", "-q", "--format", "json", str(package), "--spec", str(spec), "--new-tokens", "6"]) == 0
    checks = {c["check"]: c["ok"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["mtp head logits (draft vocabulary)"] and checks["mtp head logits outside the draft vocabulary"]
    broken = workdir / "pkg-draft-broken"
    shutil.copytree(package, broken)
    head = onnx.load(broken / "mtp" / "mtp.onnx", load_external_data=False)
    table = next(t for t in head.graph.initializer if t.name == DRAFT_POSITIONS)
    offset = int({e.key: e.value for e in table.external_data}["offset"])
    with open(broken / "mtp" / "mtp.onnx.data", "r+b") as data:  # int32 entry 200, in place
        data.seek(offset + 200 * 4)
        data.write((0).to_bytes(4, "little"))  # token 200 (not among ids 0..159) now reads token 0's score
    remanifest(broken)  # as if written so: the table's check is what fails, not the manifest's
    assert main(["verify", "-q", str(broken), "--spec", str(spec), "--new-tokens", "4"]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    # Token 200's logit is wrong in every row the head scored, and nothing else is.
    assert len(failed) == 1 and failed[0].startswith("FAIL mtp head logits outside the draft vocabulary: ")
    assert failed[0].endswith(" of them are not -65504")
