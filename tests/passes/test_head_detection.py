import pytest

from mtpc.diagnostics import MtpcError
from mtpc.ir import HeadPolicy
from mtpc.passes import default_pipeline
from mtpc.passes.head_detection import HeadDetection

from tests.fixtures.arch import tiny_arch
from tests.passes.ir_factory import compiled, make_ir

WITH_HEAD = tiny_arch(mtp_num_layers=1)
WITHOUT_HEAD = tiny_arch(mtp_num_layers=0)


@pytest.mark.parametrize(
    "policy, arch, expected",
    [
        (HeadPolicy.AUTO, WITH_HEAD, True),
        (HeadPolicy.AUTO, WITHOUT_HEAD, False),
        (HeadPolicy.ON, WITH_HEAD, True),
        (HeadPolicy.OFF, WITH_HEAD, False),
        (HeadPolicy.OFF, WITHOUT_HEAD, False),
    ],
)
def test_policy_decides_emit_head(policy, arch, expected):
    ir = make_ir(arch=arch, head=policy)
    result = HeadDetection()(ir)
    assert result.ir.mtp.emit_head is expected
    assert result.modified and result.changes
    assert ir.mtp.emit_head is None  # the input IR is not touched


def test_on_without_source_head_is_a_user_error():
    with pytest.raises(MtpcError) as err:
        HeadDetection()(make_ir(arch=WITHOUT_HEAD, head=HeadPolicy.ON))
    assert "the source ships no MTP head" in str(err.value)
    assert err.value.exit_code == 1


def test_pipeline_names_the_refusing_pass():
    with pytest.raises(MtpcError) as err:
        default_pipeline().run(make_ir(arch=WITHOUT_HEAD, head=HeadPolicy.ON))
    assert str(err.value).startswith("mtp.head: error: [head-detection] ")


def test_a_head_keeps_the_main_hidden_state_output():
    result = HeadDetection()(make_ir(arch=WITH_HEAD))
    main = result.ir.main
    assert main.output_name("hidden_states") == "hidden_states"
    assert main.contract.output("hidden_states").shape == ("batch_size", "sequence_length", 64)


@pytest.mark.parametrize("policy, arch", [(HeadPolicy.AUTO, WITHOUT_HEAD), (HeadPolicy.OFF, WITH_HEAD)])
def test_no_head_leaves_no_trace_of_mtp(policy, arch):
    ir = compiled(arch=arch, head=policy)
    assert ir.heads == ()
    assert ir.main.output_name("hidden_states") is None
    names = [t.name for t in ir.main.contract.all()]
    assert not [n for n in names if "hidden" in n or "mtp" in n]
    # Without a head the CPU profile has no reason to change the logits dtype.
    assert ir.main.contract.output("logits").dtype == "float32"


def test_second_run_changes_nothing():
    once = HeadDetection()(make_ir(arch=WITHOUT_HEAD)).ir
    again = HeadDetection()(once)
    assert not again.modified and again.ir is once
