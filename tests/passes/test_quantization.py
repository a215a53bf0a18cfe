"""passes/quantization.py: every weight's storage decided in the IR, with its rule; re-quantization is said aloud."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from mtpc.cli.main import main
from mtpc.pipeline.driver import build_ir
from mtpc.ir import QuantForm, WeightRole
from mtpc.passes.quantization import grouped_lines, name_glob
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf

ARCH = tiny_arch()
CPU = 'targets:\n  onnxruntime_genai: {version: "0.18.0", execution_provider: cpu, attention: dense}\n'
# gguf-py quantizes whole 32-element rows only: the conv kernels (4 wide) stay float.
ALL_Q8_0 = (("*conv1d*", QT.F32), ("*", QT.Q8_0))


@pytest.fixture(scope="module")
def q8_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("q") / "q8.gguf", ARCH, seed=3, types=ALL_Q8_0)


def _ir(tmp_path, source: str, quantization: str, head: str = "auto"):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"mtpc: 1\nname: q\nsource: {source}\nmtp: {{head: {head}}}\nquantization: {quantization}\n{CPU}")
    return build_ir(spec)[0], spec


def _by_name(ir):
    return {w.name: w for w in ir.weights}


def test_float_source_in_float32_is_stored_exactly_with_no_note(tmp_path):
    ir, _ = _ir(tmp_path, "{synthetic: {seed: 0}}", "{default: {bits: null}}")
    assert ir.weights and all(w.lossless and w.form is None and w.rule == "default" for w in ir.weights)
    assert not [n for n in ir.notes if "not carried as stored" in n]
    roles = {w.name: w.role for w in ir.weights}
    assert roles["embed_tokens.weight"] is WeightRole.EMBEDDING
    assert roles["layers.0.linear_attn.in_proj_qkv.weight"] is WeightRole.LINEAR
    assert roles["layers.0.linear_attn.conv1d.weight"] is WeightRole.TENSOR


def test_without_a_head_no_head_weight_is_listed(tmp_path):
    ir, _ = _ir(tmp_path, "{synthetic: {seed: 0}}", "{default: {bits: null}}", head="off")
    assert not [w for w in ir.weights if w.name.startswith("mtp.")]


def test_overrides_are_named_as_the_rule_that_chose(tmp_path):
    ir, _ = _ir(
        tmp_path, "{synthetic: {seed: 0}}",
        "{default: {bits: 4, block_size: 32}, overrides: [{match: lm_head.weight, bits: null}, {match: 'mtp.*', bits: 8}]}",
    )
    w = _by_name(ir)
    assert w["lm_head.weight"].rule == "override 1 (lm_head.weight)" and w["lm_head.weight"].form is None
    assert w["mtp.fc.weight"].rule == "override 2 (mtp.*), accuracy_level from the cpu profile" and w["mtp.fc.weight"].form == QuantForm(8, 32, False)
    assert w["layers.0.mlp.up_proj.weight"].rule == "default, accuracy_level from the cpu profile" and not w["layers.0.mlp.up_proj.weight"].lossless


def test_q8_0_file_with_an_int4_default_says_it_requantizes(tmp_path, q8_gguf):
    ir, _ = _ir(tmp_path, f"{{gguf: {q8_gguf}}}", "{default: {bits: 4, block_size: 32}}")
    (note,) = [n for n in ir.notes if "not carried as stored" in n]
    assert note.startswith(
        "quantized source tensors not carried as stored: 1 Q8_0 -> int4 GatherBlockQuantized block 32 (re-quantized), "
        "39 Q8_0 -> int4 MatMulNBits block 32 accuracy 4 (re-quantized); "
    )


def test_q8_0_file_kept_as_source_is_carried_where_blocks_allow(tmp_path, q8_gguf):
    ir, _ = _ir(tmp_path, f"{{gguf: {q8_gguf}}}", "{default: {keep: source}}")
    linear = [w for w in ir.weights if w.role is WeightRole.LINEAR]
    # out_proj's columns are regrouped by value head; 16-wide heads would split 32-element blocks.
    split = [w for w in linear if w.name.endswith("linear_attn.out_proj.weight")]
    assert len(split) == 2 and all(w.form is None and w.lossless for w in split)
    carried = [w for w in linear if w not in split]
    assert carried and all(w.form == QuantForm(8, 32, False) and w.lossless for w in carried)
    assert _by_name(ir)["embed_tokens.weight"].form == QuantForm(8, 32, True)  # zero points always written
    (note,) = [n for n in ir.notes if "not carried as stored" in n]
    assert note.startswith("quantized source tensors not carried as stored: 2 Q8_0 -> float32 (dequantized); ")


def test_q5_0_is_carried_in_8_bit_blocks(tmp_path):
    path = write_gguf(tmp_path / "k.gguf", ARCH, seed=3, types=(("*ffn_down*", QT.Q5_0),))
    ir, _ = _ir(tmp_path, f"{{gguf: {path}}}", "{default: {keep: source}}")
    down = _by_name(ir)["layers.0.mlp.down_proj.weight"]
    assert down.source == "Q5_0" and down.form == QuantForm(8, 32, False) and down.lossless
    assert not [n for n in ir.notes if "not carried as stored" in n]


def test_a_type_with_no_exact_form_is_requantized_to_int4_and_said(tmp_path):
    blocks = np.random.default_rng(7).integers(0, 256, (64, 66), dtype=np.uint8)  # [64, 256] as IQ2_XXS
    blocks[:, 0:2] = np.full((64, 1), 0.01, np.float16).view(np.uint8)
    path = write_gguf(tmp_path / "k.gguf", ARCH, seed=3, raw={"blk.1.attn_output.weight": (blocks, QT.IQ2_XXS)})
    ir, _ = _ir(tmp_path, f"{{gguf: {path}}}", "{default: {keep: source}}")
    o_proj = _by_name(ir)["layers.1.self_attn.o_proj.weight"]
    # Not a float copy 16x the source's size: the nearest form the kernels take, lossy and said so.
    assert o_proj.source == "IQ2_XXS" and o_proj.form == QuantForm(4, 32, False) and not o_proj.lossless
    (note,) = [n for n in ir.notes if "not carried as stored" in n]
    assert "1 IQ2_XXS -> int4 MatMulNBits block 32 accuracy 4 (re-quantized)" in note


def test_compile_prints_the_note_and_the_card_lists_it(tmp_path, q8_gguf, capsys):
    _, spec = _ir(tmp_path, f"{{gguf: {q8_gguf}}}", "{default: {bits: 4, block_size: 32}}")
    assert main(["compile", "-q", str(spec), "-o", str(tmp_path / "pkg")]) == 0
    assert "note: quantized source tensors not carried as stored: " in capsys.readouterr().out
    card = (tmp_path / "pkg" / "README.md").read_text()
    assert "| default, accuracy_level from the cpu profile | 39 | linear | Q8_0 | int4 MatMulNBits block 32 accuracy 4 | no |" in card
    assert "quantized source tensors not carried as stored" in card


def test_plan_groups_the_table(tmp_path, q8_gguf, capsys):
    _, spec = _ir(tmp_path, f"{{gguf: {q8_gguf}}}", "{default: {bits: 4, block_size: 32}, overrides: [{match: mtp.fc.weight, bits: null}]}")
    assert main(["plan", "-q", str(spec), "--against", str(tmp_path / "none")]) == 0
    text = capsys.readouterr().out
    assert "  quantization: modified\n" in text
    assert "    - override 1 (mtp.fc.weight): 1 linear Q8_0 -> float32 (lossless): mtp.fc.weight\n" in text
    assert (
        "    - default, accuracy_level from the cpu profile: 38 linear Q8_0 -> int4 MatMulNBits block 32 accuracy 4 "
        "(lossy): *.weight (20 patterns)\n"
    ) in text


def test_name_glob_folds_layer_indices():
    assert name_glob(["layers.0.mlp.up_proj.weight", "layers.3.mlp.up_proj.weight"]) == "layers.*.mlp.up_proj.weight"
    many = [f"layers.{i}.mlp.{p}.weight" for i in range(2) for p in ("up_proj", "down_proj", "gate_proj", "x")]
    assert name_glob(many) == "layers.*.mlp.*.weight (4 patterns)"


def test_grouped_lines_count_each_group_once(tmp_path):
    ir, _ = _ir(tmp_path, "{synthetic: {seed: 0}}", "{default: {bits: null}}")
    lines = grouped_lines(ir.weights)
    assert sum(int(line.split(": ", 1)[1].split(" ", 1)[0]) for line in lines) == len(ir.weights)
    assert np.all([line.startswith("default: ") for line in lines])


def test_diff_of_two_specs_shows_the_moved_tensor(tmp_path, q8_gguf, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    int4 = "{default: {bits: 4, block_size: 32}"
    _, a = _ir(tmp_path / "a", f"{{gguf: {q8_gguf}}}", int4 + "}")
    _, b = _ir(tmp_path / "b", f"{{gguf: {q8_gguf}}}", int4 + ", overrides: [{match: mtp.fc.weight, bits: null}]}")
    assert main(["diff", str(a), str(b)]) == 1
    text = capsys.readouterr().out
    assert '~ <ir>:/weights[name=mtp.fc.weight]/rule: "default, accuracy_level from the cpu profile" -> ' \
        '"override 1 (mtp.fc.weight)"' in text
    assert "<ir>:/weights[name=mtp.fc.weight]/form:" in text
    assert "<ir>:/weights[name=layers.0.mlp.up_proj.weight]" not in text


def _matmulnbits_levels(tmp_path, quantization: str, targets: str = CPU) -> dict[str, int]:
    import onnx

    from mtpc.pipeline.driver import build

    spec = tmp_path / "spec.yaml"
    spec.write_text(f"mtpc: 1\nname: q\nsource: {{synthetic: {{seed: 0}}}}\nquantization: {quantization}\n{targets}")
    with build(spec) as built:
        model = next(a for a in built.artifacts if a.relpath == "model.onnx")
        graph = onnx.load_from_string(model.read()).graph
        levels = {
            n.input[1]: next(a.i for a in n.attribute if a.name == "accuracy_level")
            for n in graph.node if n.op_type == "MatMulNBits"
        }
        table = {w.name: w.accuracy_level for w in built.ir.weights if w.form is not None}
    assert set(levels.values()) == set(table.values())  # the graphs apply the table
    return levels


def test_accuracy_level_defaults_from_the_cpu_profile(tmp_path):
    levels = _matmulnbits_levels(tmp_path, "{default: {bits: 4}}")
    assert levels and set(levels.values()) == {4}


def test_accuracy_level_written_in_the_spec_wins_per_rule(tmp_path):
    levels = _matmulnbits_levels(
        tmp_path, "{default: {bits: 4, accuracy_level: 0}, overrides: [{match: 'layers.*.mlp.*', accuracy_level: 1}]}"
    )
    assert {name: level for name, level in levels.items() if ".mlp." in name} and all(
        level == (1 if ".mlp." in name else 0) for name, level in levels.items()
    )


def test_accuracy_level_is_unset_on_cuda(tmp_path):
    cuda = 'targets:\n  onnxruntime_genai: {version: "0.18.0", execution_provider: cuda, attention: dense}\n'
    levels = _matmulnbits_levels(tmp_path, "{default: {bits: 4}}", cuda)
    assert levels and set(levels.values()) == {0}


def test_kept_source_blocks_take_an_accuracy_level(tmp_path, q8_gguf):
    ir, _ = _ir(tmp_path, f"{{gguf: {q8_gguf}}}", "{default: {keep: source, accuracy_level: 2}}")
    kept = [w for w in ir.weights if w.role is WeightRole.LINEAR and w.form is not None]
    assert kept and all(w.accuracy_level == 2 and w.lossless for w in kept)


def test_compile_reports_the_measured_requantization_error(tmp_path, capsys):
    blocks = np.random.default_rng(7).integers(0, 256, (64, 66), dtype=np.uint8)  # [64, 256] as IQ2_XXS
    blocks[:, 0:2] = np.full((64, 1), 0.01, np.float16).view(np.uint8)
    path = write_gguf(tmp_path / "k.gguf", ARCH, seed=3, raw={"blk.1.attn_output.weight": (blocks, QT.IQ2_XXS)})
    _, spec = _ir(tmp_path, f"{{gguf: {path}}}", "{default: {keep: source}}")
    assert main(["compile", "--format", "json", str(spec), "-o", str(tmp_path / "pkg")]) == 0
    import json

    (note,) = [n for n in json.loads(capsys.readouterr().out)["notes"] if n.startswith("re-quantized source tensors")]
    # Measured independently: gguf-py's dequantization against the package's stored int4 blocks.
    from gguf.quants import dequantize
    from mtpc.weights.quant import quantize_linear

    source = dequantize(blocks, QT.IQ2_XXS)
    expected = np.abs(quantize_linear(source, 4, 32).dequantize() - source).max()
    assert note.endswith(f"IQ2_XXS -> int4 MatMulNBits block 32 accuracy 4: {expected:.3g} over 1 tensor")
    assert expected > 0


@pytest.mark.parametrize("quantization", [
    "{default: {bits: 4, block_size: 32}, overrides: [{match: embed_tokens.weight, bits: null}, "
    "{match: lm_head.weight, bits: 8, block_size: 32}, {match: 'layers.1.*', keep: source}]}",
    "{default: {keep: source}, overrides: [{match: embed_tokens.weight, bits: 8, block_size: 32}, "
    "{match: '*mlp*', bits: 4, block_size: 64, accuracy_level: 1}]}",
    "{default: {bits: null}}",
])
def test_each_kind_of_weight_decided_once_is_every_weight_decided_alone(tmp_path, quantization):
    """The pass decides a kind of weight once (role, matching override, the source tensor but its name):
    the table is what deciding every weight on its own gives."""
    from mtpc.passes.quantization import decide, execution_provider, profile_accuracy

    mixed = write_gguf(tmp_path / "mixed.gguf", ARCH, seed=1, types=(("*conv1d*", QT.F32), ("*attn_q*", QT.Q4_0),
                                                                    ("*ffn*", QT.Q8_0), ("*", QT.F16)))
    kinds = set()
    for source in (f"{{gguf: {mixed.name}}}", "{synthetic: {seed: 0}}"):
        ir, _ = _ir(tmp_path, source, quantization)
        used = [t for t in ir.source_tensors if ir.mtp.emit_head or not t.name.startswith("mtp.")]
        alone = tuple(decide(t, ir.quantization, ir.precision.io_dtype, profile_accuracy(ir), execution_provider(ir))
                      for t in used)
        assert ir.weights == alone
        kinds |= {(w.rule, w.source, w.result) for w in alone}
    assert len(kinds) > 3


def test_a_moe_layer_whose_stacks_keep_source_forms_apart_is_kept_float_alike():
    """llama-quantize's Q4_K_M: gate/up Q4_K (no QMoE form: dequantized), down Q6_K (QMoE blocks as stored)."""
    from mtpc.ir import QuantForm, WeightDecision, WeightRole
    from mtpc.passes.quantization import EXPERTS_ALIKE, experts_kept_alike

    def stack(proj, source, form, rule="default, keep: source"):
        return WeightDecision(f"layers.2.mlp.experts.{proj}_proj.weight", WeightRole.EXPERTS, source, form, rule,
                              True, "float32", 4 if form else 0)

    q6k = QuantForm(8, 16, False)
    mixed = (stack("gate", "Q4_K", None), stack("up", "Q4_K", None),
             stack("down", "Q6_K", q6k, "default, keep: source, accuracy_level from the cpu profile"))
    alike = experts_kept_alike(mixed)
    assert [w.form for w in alike] == [None] * 3 and all(w.lossless and w.accuracy_level == 0 for w in alike)
    assert alike[2].rule == "default, keep: source" + EXPERTS_ALIKE and alike[:2] == mixed[:2]
    # Stacks that explicit rules part are left for the graph builder to refuse ("give mlp.experts.* one rule").
    ruled = (stack("gate", "float32", None, "default"), stack("up", "float32", None, "default"),
             stack("down", "float32", QuantForm(8, 32, False), "override 1 (*.down_proj.weight)"))
    assert experts_kept_alike(ruled) == ruled
