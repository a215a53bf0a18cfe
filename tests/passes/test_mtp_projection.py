from dataclasses import replace

import pytest

from mtpc.ir.contracts import onnx_genai_head_contract, ort_head_contract
from mtpc.ir import (
    AttentionMode,
    HeadContract,
    LayerKind,
    OnnxGenaiTarget,
    SharedInitializer,
    SlidingWindow,
    StateGroup,
)
from mtpc.passes.mtp_projection import MtpHeadProjection
from mtpc.passes.paged_io import packed_decoder

from tests.passes.ir_factory import CUDA_DENSE, CUDA_PAGED, decided, make_ir

ORT, ONNX = HeadContract.ORT_GENAI, HeadContract.ONNX_GENAI


def _main_with_everything(ir):
    """A main decoder carrying every field the projection must drop or inherit, all non-default."""
    main = replace(
        ir.main,
        execution_provider="cuda",
        session_options=(("log_id", "main"), ("session.use_device_allocator_for_initializers", "1")),
        state_groups=(StateGroup("paged_kv", (1, 3)), StateGroup("fixed_conv", (0, 2))),
        sliding_window=SlidingWindow(window_size=128, layers=(1,)),
        shared_initializers=(SharedInitializer("model.embed_tokens.weight", "model.onnx.data", 0, 32768, 10, (256, 64)),),
        num_key_value_heads=7,  # not the architecture's: the head takes its KV geometry from the architecture
        head_size=9,
    )
    assert main.conv_kernel == 4
    return replace(ir, main=main)


@pytest.fixture(scope="module")
def projected():
    ir = _main_with_everything(decided(make_ir(ort=CUDA_DENSE, onnx_genai=OnnxGenaiTarget()), True))
    result = MtpHeadProjection()(ir)
    assert result.modified
    return ir, result.ir


def test_both_runtimes_get_a_head_in_a_fixed_order(projected):
    _, out = projected
    assert [contract for contract, _ in out.heads] == [ORT, ONNX]


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_state_groups_are_dropped(projected, contract):
    assert projected[1].head(contract).state_groups == ()


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_conv_metadata_is_dropped(projected, contract):
    assert projected[1].head(contract).conv_kernel == 0


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_sliding_window_is_dropped(projected, contract):
    assert projected[1].head(contract).sliding_window is None


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_main_shared_initializers_are_not_inherited(projected, contract):
    assert projected[1].head(contract).shared_initializers == ()


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_one_full_attention_layer(projected, contract):
    head = projected[1].head(contract)
    assert head.layer_kinds == (LayerKind.FULL_ATTENTION,)
    assert head.num_hidden_layers == 1


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_kv_geometry_comes_from_the_architecture(projected, contract):
    head = projected[1].head(contract)
    assert (head.num_key_value_heads, head.head_size) == (2, 64)  # tiny_arch: 2 KV heads of 64


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_hidden_size_and_attention_heads_are_inherited(projected, contract):
    source, out = projected
    head = out.head(contract)
    assert (head.hidden_size, head.num_attention_heads) == (source.main.hidden_size, source.main.num_attention_heads)


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_execution_provider_is_inherited(projected, contract):
    assert projected[1].head(contract).execution_provider == "cuda"


@pytest.mark.parametrize("contract", [ORT, ONNX])
def test_session_options_are_inherited(projected, contract):
    assert projected[1].head(contract).session_options == projected[0].main.session_options


def test_dense_attention_mode_is_inherited(projected):
    assert projected[1].head(ORT).attention is AttentionMode.DENSE


def test_onnxruntime_genai_head_names_file_and_contract(projected):
    source, out = projected
    head = out.head(ORT)
    assert head.filename == "mtp/mtp.onnx"  # its own folder, so og.MtpGenerator can load it as a model
    assert dict(head.inputs) == {
        "input_ids": "input_ids",
        "hidden_states": "hidden_states",
        "attention_mask": "attention_mask",
        "position_ids": "position_ids",
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    }
    assert dict(head.outputs) == {
        "logits": "logits",
        "hidden_states": "hidden_states_out",
        "present_key_names": "present.%d.key",
        "present_value_names": "present.%d.value",
    }
    assert head.contract == ort_head_contract(source.architecture, source.precision)


def test_onnx_genai_head_names_file_and_contract(projected):
    source, out = projected
    head = out.head(ONNX)
    assert head.filename == "mtp_sidecar/mtp_sidecar.onnx"  # the package root holds one .onnx for onnx-genai
    assert dict(head.inputs)["inputs_embeds"] == "inputs_embeds"
    assert dict(head.outputs)["hidden_states"] == "mtp_hidden"
    assert head.contract == onnx_genai_head_contract(source.architecture, source.precision)


def test_heads_are_written_dense_for_a_paged_target():
    # PagedIoRewrite runs after this pass and packs the onnxruntime-genai head with the main decoder.
    ir = decided(make_ir(ort=CUDA_PAGED, onnx_genai=OnnxGenaiTarget()), True)
    out = MtpHeadProjection()(ir).ir
    for contract in (ORT, ONNX):
        head = out.head(contract)
        assert head.attention is AttentionMode.DENSE
        assert head.input_name("block_table") is None and head.input_name("attention_mask") is not None


def test_a_paged_main_decoder_means_the_passes_ran_out_of_order():
    ir = decided(make_ir(ort=CUDA_PAGED), True)
    with pytest.raises(AssertionError, match="before PagedIoRewrite"):
        MtpHeadProjection()(replace(ir, main=packed_decoder(ir.main)))


@pytest.mark.parametrize(
    "targets, expected",
    [({"ort": CUDA_DENSE}, [ORT]), ({"ort": None, "onnx_genai": OnnxGenaiTarget()}, [ONNX])],
)
def test_one_head_per_configured_runtime(targets, expected):
    out = MtpHeadProjection()(decided(make_ir(**targets), True)).ir
    assert [contract for contract, _ in out.heads] == expected


def test_no_head_no_configs():
    ir = decided(make_ir(onnx_genai=OnnxGenaiTarget()), False)
    result = MtpHeadProjection()(ir)
    assert not result.modified and result.ir.heads == ()


def test_second_run_changes_nothing(projected):
    again = MtpHeadProjection()(projected[1])
    assert not again.modified and again.ir is projected[1]
