"""Qwen3.5-MoE GGUFs as llama.cpp's own converter writes them (`qwen35moe`) decode like transformers.

The release-layout checkpoint (head experts fused) with a tiny tokenizer goes through
`convert_hf_to_gguf.py` from the llama-cpp-python sdist (tests/clients/llama_cpp.py) at f32;
gguf-py reads the result to pin the names and keys mtpc relies on, and the package compiled from
the GGUF must give transformers' greedy tokens, and MTP the same tokens with the same drafts as
the numpy rendition of speculative decoding.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader

from mtpc.ir import SourceRef
from mtpc.sources import gguf
from tests.clients import llama_cpp
from tests.fixtures.fitted_head import PROMPTS, simulate_speculative
from tests.fixtures.moe_checkpoints import fitted_moe_store
from tests.runtime import decoding
from tests.runtime.conftest import STEPS

from .conftest import compile_moe


@pytest.fixture(scope="session")
def moe_gguf(moe_workdir, moe_release_with_tokenizer):
    try:
        llama_cpp.converter_tree()
    except llama_cpp.ConverterUnavailable as error:  # fail, never skip: without it nothing here is tested
        pytest.fail(f"llama.cpp's converter is needed and could not be had: {error}", pytrace=False)
    return llama_cpp.convert(moe_release_with_tokenizer, {"f32": moe_workdir / "moe-f32.gguf"})["f32"]


@pytest.fixture(scope="session")
def moe_gguf_models(moe_workdir, moe_gguf):
    package = compile_moe(moe_workdir, "moe-gguf", f"{{gguf: {moe_gguf.name}}}")
    return decoding.load(package), decoding.load(package / "mtp")


def test_the_converter_writes_qwen35moe_as_mtpc_reads_it(moe_gguf, moe_arch):
    reader = GGUFReader(moe_gguf)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.")}
    assert fields["general.architecture"] == "qwen35moe"
    assert (fields["qwen35moe.expert_count"], fields["qwen35moe.expert_used_count"]) == (8, 2)
    assert fields["qwen35moe.expert_feed_forward_length"] == 32
    assert fields["qwen35moe.expert_shared_feed_forward_length"] == 64
    assert fields["qwen35moe.nextn_predict_layers"] == 1
    shapes = {t.name: tuple(int(d) for d in reversed(t.shape)) for t in reader.tensors}  # numpy order
    for block in (0, moe_arch.num_layers):  # a trunk block and the nextn block carry the same sparse FFN
        p = f"blk.{block}."
        assert shapes[p + "ffn_gate_inp.weight"] == (8, 64)
        assert shapes[p + "ffn_gate_exps.weight"] == shapes[p + "ffn_up_exps.weight"] == (8, 32, 64)
        assert shapes[p + "ffn_down_exps.weight"] == (8, 64, 32)
        assert shapes[p + "ffn_gate_shexp.weight"] == (64, 64)
        assert shapes[p + "ffn_gate_inp_shexp.weight"] == (1, 64)


def test_the_gguf_reads_as_the_checkpoint(moe_gguf, moe_arch):
    ref = SourceRef("gguf", str(moe_gguf))
    info = gguf.describe(ref)
    assert info.architecture.moe == moe_arch.moe and info.architecture.family == "qwen35moe"
    store, expected = gguf.open_weights(ref, info), fitted_moe_store(moe_arch)
    assert sorted(store.names()) == sorted(expected.names())
    for name in expected.names():
        np.testing.assert_allclose(store.read_float(name), expected.read_float(name), rtol=0, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_equals_transformers(moe_gguf_models, moe_transformers_greedy, prompt):
    main_model, _ = moe_gguf_models
    assert decoding.greedy(main_model, list(prompt), STEPS) == moe_transformers_greedy[prompt]


@pytest.mark.parametrize("max_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_mtp_decoding_equals_greedy(moe_gguf_models, moe_transformers_greedy, moe_reference, moe_head_reference,
                                    prompt, max_draft):
    main_model, head = moe_gguf_models
    run = decoding.speculative(main_model, head, list(prompt), STEPS, max_draft)
    assert run.tokens == moe_transformers_greedy[prompt]
    expected = simulate_speculative(moe_reference, moe_head_reference, list(prompt), STEPS, max_draft)
    assert (run.proposed, run.accepted) == (expected.drafted, expected.accepted)
    assert run.accepted > 0 and run.rejected > 0, run
