"""weights/presets.py: `quantization.default.preset` decides each weight from the architecture, the spec's overrides win.

Whether `q4_k_m` chooses as llama.cpp's own `llama-quantize ... Q4_K_M` does is held against llama-quantize's
output in tests/conformance/test_llama_cpp.py; here, what the preset decides and how a spec combines with it.
"""

from __future__ import annotations

from mtpc.ir import QuantForm, QuantScheme
from mtpc.pipeline.driver import build_ir
from mtpc.weights import canonical_shapes
from mtpc.weights.presets import expand
from tests.fixtures.arch import kquant_arch

CPU = 'targets:\n  onnxruntime_genai: {execution_provider: cpu}\n'


def _ir(tmp_path, quantization: str, targets: str = CPU):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"mtpc: 1\nname: p\nsource: {{synthetic: {{seed: 0}}}}\nquantization: {quantization}\n{targets}")
    return {w.name: w for w in build_ir(spec)[0].weights}


def test_q4_k_m_gives_8_bits_where_use_more_bits_counts_them():
    # kquant_arch: tiny_arch's layers (linear, full, linear, full and an MTP block) with rows of 256 or more. llama.cpp counts value-like projections (a linear
    # layer's attn_qkv, a full layer's attn_v) and down projections over all five blocks: use_more_bits(i, 5)
    # picks i = 2 (the (i - n/8) % 3 == 2 rule) and i = 4 (i >= 7n/8).
    arch = kquant_arch()
    default, overrides, label = expand("q4_k_m", arch, accuracy_level=None, float_embedding=False,
                                       existing=set(canonical_shapes(arch)))
    assert default == QuantScheme(bits=4, block_size=32, symmetric=False, float_zero_points=True)
    assert label == "preset q4_k_m: Q4_K"
    eight = sorted(o.match for o in overrides if o.scheme.bits == 8)
    assert eight == ["layers.2.linear_attn.in_proj_qkv.weight", "layers.2.mlp.down_proj.weight", "lm_head.weight",
                     "mtp.layers.0.mlp.down_proj.weight", "mtp.layers.0.self_attn.v_proj.weight"]
    assert all(o.scheme == QuantScheme(bits=8, block_size=16) for o in overrides if o.scheme.bits == 8)
    assert [o.scheme for o in overrides if o.match == "embed_tokens.weight"] == [default]
    assert not [o for o in overrides if o.scheme.bits not in (4, 8)]  # every row a multiple of 256: no fallback


def test_the_plan_names_the_preset_and_its_reason_per_weight(tmp_path):
    w = _ir(tmp_path, "{default: {preset: q4_k_m}}")
    # tiny_arch's rows of 64 take no k-quant: llama-quantize's fallbacks, Q5_0 and Q8_0, both 8-bit blocks of 32.
    assert w["lm_head.weight"].rule == ("preset q4_k_m: Q8_0 (the LM head; rows of 64 take no Q6_K), "
                                        "accuracy_level from the cpu profile")
    assert w["lm_head.weight"].form == QuantForm(8, 32, False)
    assert w["layers.2.mlp.down_proj.weight"].rule.startswith(
        "preset q4_k_m: Q8_0 (layers.2.mlp.down_proj: down projection 3 of 5; rows of 128 take no Q6_K)")
    assert w["layers.0.mlp.up_proj.weight"].rule == ("preset q4_k_m: Q5_0 (rows of 64 take no Q4_K), "
                                                     "accuracy_level from the cpu profile")
    assert (w["embed_tokens.weight"].form.bits, w["embed_tokens.weight"].form.block_size) == (8, 32)
    assert w["norm.weight"].rule == "default" and w["norm.weight"].form is None  # norms stay float


def test_the_specs_overrides_win_and_the_accuracy_level_applies_to_all(tmp_path):
    w = _ir(tmp_path, "{default: {preset: q4_k_m, accuracy_level: 0}, overrides: [{match: lm_head.weight, bits: null}, "
                      "{match: 'layers.0.*', bits: 8}]}")
    assert w["lm_head.weight"].rule == "override 1 (lm_head.weight)" and w["lm_head.weight"].form is None
    # Unset fields of an override come from the preset's default: 8 bits in blocks of 32, asymmetric.
    assert w["layers.0.mlp.up_proj.weight"].form == QuantForm(8, 32, True)
    assert {x.accuracy_level for x in w.values() if x.form is not None and x.role.value == "linear"} == {0}


def test_with_an_onnx_genai_target_the_embedding_stays_float(tmp_path):
    w = _ir(tmp_path, "{default: {preset: q4_k_m}}", CPU + "  onnx_genai: {layout: flat}\n")
    assert w["embed_tokens.weight"].form is None
    assert w["embed_tokens.weight"].rule == "preset q4_k_m: the embedding float: onnx-genai's head borrows a dense table"
