from dataclasses import replace

import pytest

from mtpc.util.diagnostics import MtpcError
from mtpc.ir import HeadPolicy
from mtpc.passes import default_pipeline
from mtpc.passes.head_detection import HeadDetection, emits_head

from tests.fixtures.arch import tiny_arch
from tests.passes.ir_factory import CPU_DENSE, compiled, make_ir

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


STATIC_CPU = replace(CPU_DENSE, kv_cache="static")


def test_static_cache_target_skips_the_head_with_a_note():
    result = HeadDetection()(make_ir(arch=WITH_HEAD, ort=STATIC_CPU))
    assert result.ir.mtp.emit_head is False
    assert result.ir.main.output_name("hidden_states") is None
    (note,) = result.ir.notes
    assert note.startswith("MTP head skipped: a static KV cache target cannot roll back rejected drafts;")
    assert "kv_cache: dynamic" in note  # says how to keep the head
    assert "mtp.emit_head = False (targets.onnxruntime_genai.kv_cache is 'static')" in result.changes


def test_static_cache_skip_is_stable_on_a_second_run():
    once = HeadDetection()(make_ir(arch=WITH_HEAD, ort=STATIC_CPU)).ir
    again = HeadDetection()(once)
    assert not again.modified and again.ir.notes == once.notes


@pytest.mark.parametrize("policy, arch", [(HeadPolicy.OFF, WITH_HEAD), (HeadPolicy.AUTO, WITHOUT_HEAD)])
def test_static_cache_notes_nothing_when_no_head_was_coming(policy, arch):
    result = HeadDetection()(make_ir(arch=arch, head=policy, ort=STATIC_CPU))
    assert result.ir.mtp.emit_head is False
    assert result.ir.notes == ()


def test_dynamic_cache_keeps_the_head_without_a_note():
    result = HeadDetection()(make_ir(arch=WITH_HEAD, ort=replace(CPU_DENSE, kv_cache="dynamic")))
    assert result.ir.mtp.emit_head is True and result.ir.notes == ()


def test_head_on_with_a_static_cache_is_a_user_error():
    with pytest.raises(MtpcError) as err:
        HeadDetection()(make_ir(arch=WITH_HEAD, head=HeadPolicy.ON, ort=STATIC_CPU))
    message = str(err.value)
    assert "mtp.head is 'on' but targets.onnxruntime_genai.kv_cache is 'static'" in message
    assert "cannot roll back rejected drafts" in message
    assert err.value.exit_code == 1 and err.value.diagnostics[0].path == "mtp.head"


@pytest.mark.parametrize("policy", list(HeadPolicy))
@pytest.mark.parametrize("arch", [WITH_HEAD, WITHOUT_HEAD], ids=["head", "nohead"])
@pytest.mark.parametrize("ort", [CPU_DENSE, STATIC_CPU, None], ids=["dynamic", "static", "no-ort"])
def test_emits_head_agrees_with_the_pass(policy, arch, ort):
    # Lowering asks emits_head() before the pass runs; both must mean the same package.
    ir = make_ir(arch=arch, head=policy, ort=ort)
    try:
        decided = HeadDetection()(ir).ir.mtp.emit_head
    except MtpcError:
        return  # a refused combination: the pass's own error stands
    expected = arch is WITH_HEAD and policy is not HeadPolicy.OFF and ort is not STATIC_CPU
    assert emits_head(ir) is decided is expected
