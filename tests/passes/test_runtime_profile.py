from dataclasses import replace

import pytest

from mtpc.util.diagnostics import MtpcError
from mtpc.ir import AttentionMode, HeadContract, OrtGenaiTarget
from mtpc.passes.runtime_profile import ApplyRuntimeProfile

from tests.fixtures.arch import tiny_arch
from tests.passes.ir_factory import CPU_DENSE, CUDA_DENSE, CUDA_PAGED, compiled, decided, make_ir


def _dtypes(contract):
    return {t.name: t.dtype for t in contract.outputs}


def test_cpu_with_head_gets_float16_logits_and_nothing_else_changes():
    ir = decided(make_ir(ort=CPU_DENSE), True)
    result = ApplyRuntimeProfile()(ir)
    assert result.modified
    assert result.ir.precision.io_dtype == "float32"
    assert result.ir.precision.effective_logits_dtype == "float16"
    before, after = _dtypes(ir.main.contract), _dtypes(result.ir.main.contract)
    assert after.pop("logits") == "float16" and before.pop("logits") == "float32"
    assert after == before  # hidden states and caches keep the I/O dtype
    assert any("float16" in note for note in result.ir.notes)


def test_cpu_without_head_keeps_float32_logits():
    ir = decided(make_ir(ort=CPU_DENSE), False)
    result = ApplyRuntimeProfile()(ir)
    assert not result.modified and result.ir is ir


@pytest.mark.parametrize("io_dtype", ["float32", "float16"])
def test_cuda_keeps_the_io_dtype(io_dtype):
    ir = decided(make_ir(ort=CUDA_DENSE, io_dtype=io_dtype), True)
    result = ApplyRuntimeProfile()(ir)
    assert not result.modified
    assert result.ir.main.contract.output("logits").dtype == io_dtype


def test_no_onnxruntime_genai_target_is_left_alone():
    ir = decided(make_ir(ort=None), True)
    assert ApplyRuntimeProfile()(ir).ir is ir


def test_the_projected_head_inherits_the_profiled_logits_dtype():
    ir = compiled(ort=CPU_DENSE)
    head = ir.head(HeadContract.ORT_GENAI)
    assert head.contract.output("logits").dtype == "float16"
    assert head.contract.output("hidden_states_out").dtype == "float32"


def test_main_execution_provider_follows_the_target():
    ir = decided(make_ir(ort=CPU_DENSE), False)
    ir = replace(ir, targets=replace(ir.targets, onnxruntime_genai=CUDA_DENSE))
    result = ApplyRuntimeProfile()(ir)
    assert result.ir.main.execution_provider == "cuda"


def test_version_without_profile_is_a_user_error():
    ir = decided(make_ir(ort=replace(CPU_DENSE, version="0.11.0")), True)
    with pytest.raises(MtpcError) as err:
        ApplyRuntimeProfile()(ir)
    assert "no runtime profile for onnxruntime_genai version '0.11.0'" in str(err.value)


def test_short_version_finds_the_profile():
    ir = decided(make_ir(ort=replace(CPU_DENSE, version="0.18")), True)
    assert ApplyRuntimeProfile()(ir).ir.precision.logits_dtype == "float16"


@pytest.mark.parametrize(
    "target, io_dtype, message",
    [
        (replace(CPU_DENSE, attention=AttentionMode.PAGED), "float16", "paged attention needs execution_provider 'cuda', not 'cpu'"),
        (CUDA_PAGED, "float32", "paged attention needs precision.io_dtype 'float16' or 'bfloat16', not 'float32'"),
        (replace(CUDA_PAGED, block_size=24), "float16", "block_size must be a power of two, at least 16"),
        (replace(CUDA_PAGED, block_size=8), "float16", "block_size must be a power of two, at least 16"),
        (replace(CUDA_PAGED, max_batch_size=257), "float16", "max_batch_size must be in 1..256"),
        (replace(CUDA_PAGED, num_blocks=8, gpu_utilization_factor=0.5), "float16", "not both"),
        (replace(CUDA_PAGED, gpu_utilization_factor=1.5), "float16", "gpu_utilization_factor must be in (0, 1]"),
        (replace(CUDA_DENSE, max_draft_tokens=17), "float16", "max_draft_tokens must be in 1..16"),
        (replace(CUDA_DENSE, execution_provider="dml"), "float16", "execution provider 'dml' is not supported"),
        (replace(CUDA_PAGED, kv_cache="static"), "float16", "kv_cache 'static' needs attention 'dense', not 'paged'"),
    ],
)
def test_target_settings_the_runtime_refuses(target, io_dtype, message):
    ir = decided(make_ir(ort=target, io_dtype=io_dtype), True)
    with pytest.raises(MtpcError) as err:
        ApplyRuntimeProfile()(ir)
    assert message in str(err.value)
    assert err.value.diagnostics[0].path.startswith("targets.onnxruntime_genai.")


def test_all_refusals_are_reported_together():
    target = OrtGenaiTarget(execution_provider="cpu", attention=AttentionMode.PAGED, block_size=24, max_draft_tokens=0)
    with pytest.raises(MtpcError) as err:
        ApplyRuntimeProfile()(decided(make_ir(arch=tiny_arch(), ort=target, io_dtype="float32"), True))
    assert len(err.value.diagnostics) == 4


def test_refusals_name_the_setting_as_a_spec_spells_it():
    target = replace(CUDA_PAGED, block_size=24, num_blocks=0)
    with pytest.raises(MtpcError) as err:
        ApplyRuntimeProfile()(decided(make_ir(ort=target), True))
    assert [d.path for d in err.value.diagnostics] == [
        "targets.onnxruntime_genai.paged.block_size",
        "targets.onnxruntime_genai.paged.num_blocks",
    ]
