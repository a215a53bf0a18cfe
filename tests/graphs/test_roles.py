from dataclasses import replace

import pytest

from mtpc.graphs.roles import input_name, output_name
from mtpc.ir import DecoderConfig, GraphContract, HeadContract, LayerKind
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.arch import tiny_arch

from .tiny import ORT_HEAD_FILE, emit, make_ir

CFG = DecoderConfig(
    filename="model.onnx",
    hidden_size=8,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_size=4,
    layer_kinds=(LayerKind.FULL_ATTENTION,),
    inputs=(("input_ids", "tokens"), ("past_key_names", "cache.%d.k"), ("hidden_states", "seed")),
    outputs=(("present_key_names", "new_cache.%d.k"), ("hidden_states", "hidden_out")),
    contract=GraphContract((), ()),
)


def test_names_come_from_the_config_with_layers_filled_in():
    assert input_name(CFG, "input_ids") == "tokens"
    assert input_name(CFG, "past_key_names", 3) == "cache.3.k"
    assert output_name(CFG, "present_key_names", 12) == "new_cache.12.k"


def test_a_role_named_both_ways_resolves_by_direction():
    assert (input_name(CFG, "hidden_states"), output_name(CFG, "hidden_states")) == ("seed", "hidden_out")


@pytest.mark.parametrize("lookup, role", [(input_name, "position_ids"), (output_name, "logits"),
                                          (output_name, "input_ids")])
def test_a_missing_role_is_a_bug_not_a_default(lookup, role):
    with pytest.raises(AssertionError, match=role):
        lookup(CFG, role)


def test_head_builder_rejects_a_config_without_its_seed_input():
    arch = tiny_arch()
    ir = make_ir(arch, heads=(HeadContract.ORT_GENAI,))
    kind, head = ir.heads[0]
    head = replace(head, inputs=tuple((r, n) for r, n in head.inputs if r != "hidden_states"))
    with pytest.raises(AssertionError, match=f"{ORT_HEAD_FILE}.*'hidden_states'"):
        emit(replace(ir, heads=((kind, head),)), seeded_store(arch, 0))
