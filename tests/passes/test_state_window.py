"""The state-window pass: which packages get a window of per-token linear-attention states, and its shapes."""

from dataclasses import replace

import pytest

from mtpc.ir import AttentionMode, LayerKind
from mtpc.passes.state_window import StateWindow
from mtpc.profiles import ort_genai_profile
from mtpc.util.diagnostics import MtpcError

from tests.fixtures.arch import tiny_arch
from tests.passes.ir_factory import CPU_DENSE, CUDA_PAGED, compiled

FULL = LayerKind.FULL_ATTENTION


def _state_shapes(ir) -> dict[str, tuple]:
    return {t.name: tuple(t.shape) for t in ir.main.contract.all() if t.name.endswith((".conv", ".recurrent"))}


def test_auto_windows_a_drafting_hybrid_over_a_verify():
    ir = compiled(ort=replace(CPU_DENSE, max_draft_tokens=3))
    assert ir.main.state_window == 4
    shapes = _state_shapes(ir)
    # Every conv / recurrent past and present of the two linear layers, a leading static window axis.
    assert shapes == {
        **{f"{io}.{i}.conv": (4, "batch_size", 128, 3) for io in ("past", "present") for i in (0, 2)},
        **{f"{io}.{i}.recurrent": (4, "batch_size", 4, 16, 16) for io in ("past", "present") for i in (0, 2)},
    }
    unwindowed = compiled(ort=replace(CPU_DENSE, max_draft_tokens=3, state_window="off"))
    assert unwindowed.main.state_window == 0
    assert {n: s[1:] for n, s in shapes.items()} == _state_shapes(unwindowed)
    # Nothing else in the main contract differs, and the heads are untouched.
    others = lambda ir: [t for t in ir.main.contract.all() if not t.name.endswith((".conv", ".recurrent"))]
    assert others(ir) == others(unwindowed) and ir.heads == unwindowed.heads


@pytest.mark.parametrize("why, kw", [
    ("no head drafts", dict(arch=tiny_arch(mtp_num_layers=0))),
    ("no linear layers", dict(arch=replace(tiny_arch(), layer_kinds=(FULL,) * 4))),
    ("paged: compact state updates instead", dict(ort=CUDA_PAGED)),
    ("no onnxruntime-genai target", dict(ort=None)),
])
def test_auto_leaves_other_packages_unwindowed(why, kw):
    assert compiled(**kw).main.state_window == 0, why


def test_an_explicit_window_applies_without_a_head():
    ir = compiled(arch=tiny_arch(mtp_num_layers=0), ort=replace(CPU_DENSE, state_window=6))
    assert ir.main.state_window == 6 and _state_shapes(ir)["past.0.conv"] == (6, "batch_size", 128, 3)


def test_an_explicit_window_on_a_model_without_linear_layers_is_an_error_at_the_field():
    with pytest.raises(MtpcError) as err:
        compiled(arch=replace(tiny_arch(), layer_kinds=(FULL,) * 4), ort=replace(CPU_DENSE, state_window=5))
    (d,) = err.value.diagnostics
    assert d.path == "targets.onnxruntime_genai.state_window" and "no linear-attention layers" in d.message


@pytest.mark.parametrize("version", ["0.18.0", "0.17.1"])
def test_the_profile_refuses_a_window_smaller_than_a_verify_and_one_on_paged(version):
    profile = ort_genai_profile(version)
    small = profile.target_problems(replace(CPU_DENSE, max_draft_tokens=4, state_window=4), "float32")
    assert [p.path for p in small] == ["targets.onnxruntime_genai.state_window"] and "max_draft_tokens 4 + 1" in small[0].message
    assert profile.target_problems(replace(CPU_DENSE, max_draft_tokens=4, state_window=5), "float32") == []
    paged = profile.target_problems(replace(CUDA_PAGED, state_window=5), "float16")
    assert "targets.onnxruntime_genai.state_window" in [p.path for p in paged]


def test_the_pass_is_idempotent_and_says_what_it_did():
    ir = compiled()
    assert StateWindow()(ir).modified is False
    before = replace(ir, main=replace(ir.main, state_window=0, contract=compiled(
        ort=replace(CPU_DENSE, state_window="off")).main.contract))
    result = StateWindow()(before)
    assert result.ir.main == ir.main
    assert result.changes == ("main decoder: conv and recurrent state windowed over 3 tokens ([3, batch, ...]; "
                              "onnxruntime-genai crops a partly accepted verify instead of replaying it)",)


def _int4(ir, accuracy_level):
    from mtpc.ir import QuantScheme, QuantizationPlan

    return replace(ir, quantization=QuantizationPlan(default=QuantScheme(bits=4, accuracy_level=accuracy_level)))


def test_auto_leaves_a_package_with_int8_activations_unwindowed_and_says_why():
    from mtpc.passes import default_pipeline
    from mtpc.passes.state_window import AUTO_SKIPPED
    from tests.passes.ir_factory import make_ir

    ir = default_pipeline().run(_int4(make_ir(ort=replace(CPU_DENSE, max_draft_tokens=3)), 4))
    assert ir.main.state_window == 0 and AUTO_SKIPPED in ir.notes
    # Float activations keep the window; an explicit W windows int8 activations too.
    ir = default_pipeline().run(_int4(make_ir(ort=replace(CPU_DENSE, max_draft_tokens=3)), 0))
    assert ir.main.state_window == 4 and AUTO_SKIPPED not in ir.notes
    ir = default_pipeline().run(_int4(make_ir(ort=replace(CPU_DENSE, max_draft_tokens=3, state_window=4)), 4))
    assert ir.main.state_window == 4 and AUTO_SKIPPED not in ir.notes
